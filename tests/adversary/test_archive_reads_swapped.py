"""Probe: an archived data object swapped on the tier for another of the same size (every record
of it verifying by its own CRC) is never served: reads check the object against its manifest
entry first, and a range fetched again later against what that check saw."""

from __future__ import annotations

import pytest

from commitlog import ArchiveCorruptError
from commitlog.archive import open_archive
from commitlog.archive.tiered import ArchivedLog, archive_reader

from archive_reads_helpers import archived_log, data_key, put, tier  # noqa: F401  (a fixture)


def _reader(tier, name: str, **kwargs) -> ArchivedLog:
    return ArchivedLog(archive_reader(tier, None, name, **kwargs))


def test_a_data_object_swapped_for_another_of_the_same_size_is_refused_naming_it(tmp_path, tier):
    ours = archived_log(tmp_path, tier, "ours", seed=1)
    theirs = archived_log(tmp_path, tier, "theirs", seed=2)   # same sizes, other values
    other = tier.read(data_key("theirs", 0))
    assert len(other) == len(tier.read(data_key("ours", 0))) and ours[0] != theirs[0]
    put(tier, data_key("ours", 0), other)
    log = _reader(tier, "ours")
    for read in (lambda: log.read(0), lambda: list(log.scan()), lambda: list(log.scan(3, 4))):
        with pytest.raises(ArchiveCorruptError, match=f"object {data_key('ours', 0)}: SHA-256 .*`sha256`"):
            read()
    theirs_values = {r[3] for r in theirs}
    second = log.archive.manifest().segments[1].base_offset    # the objects not swapped still read
    assert all(r[3] not in theirs_values for r in log.scan(second))
    assert [tuple(r) for r in log.scan(second)] == ours[second:log.end_offset]


def test_a_data_object_swapped_after_it_was_checked_is_refused_when_fetched_again(tmp_path, tier):
    archived_log(tmp_path, tier, "ours", seed=1)
    archived_log(tmp_path, tier, "theirs", seed=2)
    log = _reader(tier, "ours", cache_bytes=1)        # nothing stays cached: every read fetches
    assert log.read(0).offset == 0                   # checked whole here
    put(tier, data_key("ours", 0), tier.read(data_key("theirs", 0)))
    with pytest.raises(ArchiveCorruptError, match=f"object {data_key('ours', 0)}: bytes .* replaced on the tier"):
        log.read(5)


def test_the_url_api_refuses_a_swapped_object_too(tmp_path, tier):
    archived_log(tmp_path, tier, "ours", seed=1)
    archived_log(tmp_path, tier, "theirs", seed=2)
    put(tier, data_key("ours", 0), tier.read(data_key("theirs", 0)))
    with open_archive(tier.url, "ours", endpoint=getattr(tier, "endpoint", None), region="us-east-1") as log:
        with pytest.raises(ArchiveCorruptError, match="`sha256`"):
            log.read(1)
