"""Probe: a log's name is joined into the tier's paths and keys; `open_archive(url, "../x")` read a
log outside a file:// tier. A name must be one safe path component, everywhere the tier joins it."""

from __future__ import annotations

import os

import pytest

from commitlog import ArchiveError, InvalidArgumentError
from commitlog.archive import LogArchive, open_archive, open_tier

from archive_reads_helpers import archived_log, tier  # noqa: F401  (a fixture)

UNSAFE = ["../x", "..", ".", "", "a/b", "/abs", "a\x00b", "a\nb", "a\\b", "x" * 256]


def test_a_log_outside_a_file_tier_is_never_read_through_a_dotted_name(tmp_path):
    outside = open_tier(f"file://{tmp_path}/outside")
    archived_log(tmp_path, outside, "x", n=60)       # a log beside the tier, not in it
    os.makedirs(tmp_path / "outside" / "tier")
    url = f"file://{tmp_path}/outside/tier"
    with pytest.raises(InvalidArgumentError, match=r"archive log name '\.\./x': .*one path component"):
        open_archive(url, "../x")


@pytest.mark.parametrize("name", UNSAFE, ids=repr)
def test_an_unsafe_log_name_is_refused_on_every_tier(tmp_path, tier, name):
    with pytest.raises(InvalidArgumentError, match="archive log name"):
        open_archive(tier.url, name, endpoint=getattr(tier, "endpoint", None), region="us-east-1")
    with pytest.raises(InvalidArgumentError, match="archive log name"):
        LogArchive(tier, str(tmp_path / "log"), name) if name else LogArchive(tier, "/")


def test_a_directory_tier_never_joins_a_dotted_key_part_whoever_asks(tmp_path):
    tier = open_tier(f"file://{tmp_path}/tier")
    (tmp_path / "secret").write_bytes(b"outside")
    for key in ("../secret", "log/../../secret", "log//x", "./x"):
        for call in (lambda: tier.read(key), lambda: tier.read_range(key, 0, 3), lambda: tier.size(key),
                     lambda: tier.delete(key)):
            with pytest.raises(ArchiveError, match="not a key"):
                call()
    assert (tmp_path / "secret").read_bytes() == b"outside"


def test_safe_names_still_archive_and_read(tmp_path, tier):
    written = archived_log(tmp_path, tier, "app.events-2", n=120)
    with open_archive(tier.url, "app.events-2", endpoint=getattr(tier, "endpoint", None),
                      region="us-east-1") as log:
        assert [tuple(r) for r in log.scan()] == written[:log.end_offset]
