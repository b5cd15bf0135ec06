"""The lease on a cluster log's tier (commitlog.archive.lease, decided by policies.tier_lease,
taken by retention.archiving.cluster_keeper.acquire): one owner at a time among racing processes,
on a directory tier and on an S3 API (moto)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from commitlog.archive.lease import LeaseTerm, create_term, lease_key, newest_term
from retention.archiving.cluster_keeper import acquire

LEASE_MS = 60_000
RACERS = 5
_CHILD = """
import json, os, sys, time
from commitlog.archive import open_tier
from retention.archiving.cluster_keeper import acquire
url, endpoint, go, now_ms = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
tier = open_tier(url, endpoint=endpoint or None, region="us-east-1" if endpoint else None)
me = f"racer-{os.getpid()}"
while not os.path.exists(go):
    time.sleep(0.001)
held = acquire(tier, "events", me, now_ms=now_ms, lease_ms=%d)
print(json.dumps({"me": me, "owner": held.owner, "term": held.term}))
""" % LEASE_MS


def _race(tier, tmp_path: Path, now_ms: int, round_: int) -> list[dict]:
    go = tmp_path / f"go-{round_}"
    endpoint = getattr(tier, "endpoint", None) or ""
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD, tier.url, endpoint, str(go), str(now_ms)],
                              stdout=subprocess.PIPE, env=os.environ.copy()) for _ in range(RACERS)]
    time.sleep(1.5)                       # every racer imported and waits on the start line
    go.touch()
    out = []
    for proc in procs:
        stdout, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0
        out.append(json.loads(stdout))
    return out


def test_racing_processes_leave_exactly_one_owner_of_each_term(tier, tmp_path):
    first = _race(tier, tmp_path, now_ms=1_000_000, round_=0)
    owners = {r["owner"] for r in first}
    assert len(owners) == 1 and owners <= {r["me"] for r in first}
    assert {r["term"] for r in first} == {0}
    assert newest_term(tier, "events").owner == owners.pop()
    # Within the lease and its margin nobody takes over; past them, exactly one of them does.
    assert {r["term"] for r in _race(tier, tmp_path, now_ms=1_000_000 + 2 * LEASE_MS, round_=1)} == {0}
    taken = _race(tier, tmp_path, now_ms=1_000_001 + 2 * LEASE_MS, round_=2)
    assert len({r["owner"] for r in taken}) == 1 and {r["term"] for r in taken} == {1}


def test_the_holder_renews_and_a_lapsed_holder_loses_to_the_taker(tier):
    held = acquire(tier, "events", "a", now_ms=0, lease_ms=LEASE_MS)
    assert (held.term, held.owner) == (0, "a")
    assert acquire(tier, "events", "b", now_ms=LEASE_MS, lease_ms=LEASE_MS).owner == "a"     # b waits
    renewed = acquire(tier, "events", "a", now_ms=LEASE_MS // 2, lease_ms=LEASE_MS)
    assert (renewed.term, renewed.owner, renewed.expires_at_ms) == (1, "a", LEASE_MS // 2 + LEASE_MS)
    late = LEASE_MS // 2 + 2 * LEASE_MS + 1
    assert acquire(tier, "events", "b", now_ms=late, lease_ms=LEASE_MS).owner == "b"
    assert acquire(tier, "events", "a", now_ms=late, lease_ms=LEASE_MS).owner == "b"         # a's renewal lost


def test_a_term_recreated_below_the_newest_after_pruning_is_no_lease(tier):
    for term in range(8):
        assert create_term(tier, "events", LeaseTerm(term, "a", "h", 1, 0, 10 ** 12))
    assert tier.size(lease_key("events", 0)) is None              # pruned: the newest five stay
    assert create_term(tier, "events", LeaseTerm(0, "stalled", "h", 2, 0, 10 ** 12))
    assert newest_term(tier, "events").owner == "a"
