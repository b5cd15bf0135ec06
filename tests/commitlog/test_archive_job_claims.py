"""What a cluster log's tier says of its jobs, leases and groups is read within bounds: an edited
claim, lease term or group commit (a time past the year 9999, 10**400, NaN, a negative number, a
deep nesting) is a named ArchiveCorruptError, or for a claim an unreadable deadline, never an
OverflowError or a datetime's ValueError deep in a sidecar's job."""

from __future__ import annotations

import json

import pytest

from commitlog.archive import groups, open_tier
from commitlog.archive.job_claims import claim_body, claim_deadline
from commitlog.archive.lease import LeaseTerm, lease_key, newest_term
from commitlog.errors import ArchiveCorruptError

EDITED = [10 ** 17, 10 ** 400, -5, 1.5, float("nan"), True, "1", None]


def test_a_claim_s_deadline_is_read_back_in_seconds():
    assert claim_deadline(claim_body("j", 1_700_000_000_123)) == 1_700_000_000.123
    assert claim_deadline(claim_body("j", 0, fenced_by="x")) == 0.0


@pytest.mark.parametrize("deadline", EDITED)
def test_an_edited_claim_deadline_is_unreadable_not_a_crash(deadline):
    assert claim_deadline(json.dumps({"job": "j", "deadline_ms": deadline}).encode()) is None
    assert claim_deadline(b"[" * 100_000) is None
    assert claim_deadline(None) is None


@pytest.mark.parametrize("expires", EDITED)
def test_an_edited_lease_term_is_named(tmp_path, expires):
    tier = open_tier(f"file://{tmp_path}/tier")
    body = {**LeaseTerm(0, "owner", "host", 1, 0, 1000).__dict__, "expires_at_ms": expires}
    body.pop("term", None)
    tier.create(lease_key("log", 0), json.dumps(body).encode())
    with pytest.raises(ArchiveCorruptError, match="not a lease term"):
        newest_term(tier, "log")


@pytest.mark.parametrize("when", EDITED)
def test_an_edited_group_commit_is_named(tmp_path, when):
    tier = open_tier(f"file://{tmp_path}/tier")
    body = {"group": "etl", "offset": 3, "host": "h", "committed_at_ms": when}
    tier.create(groups.group_key("log", "etl", 0), json.dumps(body).encode())
    with pytest.raises(ArchiveCorruptError, match="not a group commit"):
        groups.committed(tier, "log")
