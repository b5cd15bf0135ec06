"""The compaction record (commitlog.gaps): ranges merged and pruned, coverage questions, and a
damaged file refused by name."""

from __future__ import annotations

import os

import pytest

from commitlog import CorruptLogError, gaps
from commitlog.layout import compact_lock_path, compacted_path


def test_ranges_merge_when_adjacent_or_overlapping_and_go_below_the_start():
    pairs = [(30, 40), (10, 20), (20, 25), (38, 50), (60, 70), (1, 5)]
    assert gaps.merged(pairs, 0) == [(1, 5), (10, 25), (30, 50), (60, 70)]
    assert gaps.merged(pairs, 25) == [(30, 50), (60, 70)]


def test_unrecorded_names_the_first_part_no_range_covers():
    r = gaps.CompactedRanges((10, 30), (20, 40))
    assert r.unrecorded(10, 20) is None and r.unrecorded(12, 18) is None
    assert r.unrecorded(5, 15) == (5, 10)
    assert r.unrecorded(15, 35) == (20, 30)
    assert r.unrecorded(35, 45) == (40, 45)
    assert gaps.CompactedRanges(legacy=True).unrecorded(0, 100) is None


def test_covered_from_is_where_a_range_reaching_the_first_segment_starts():
    r = gaps.CompactedRanges((10, 30), (20, 40))
    assert r.covered_from(40, 0) == 30 and r.covered_from(40, 35) == 35
    assert r.covered_from(25, 0) == 25            # no range ends at or after 25 from below it
    assert gaps.CompactedRanges().covered_from(40, 0) == 40
    assert gaps.CompactedRanges(legacy=True).covered_from(40, 7) == 7


def test_the_file_round_trips_and_a_missing_one_is_legacy_only_after_a_compaction(tmp_path):
    d = str(tmp_path)
    assert gaps.read(d) == gaps.CompactedRanges()
    open(compact_lock_path(d), "w").close()
    assert gaps.read(d).legacy
    gaps.record(d, [(5, 9), (9, 12)], 0)
    gaps.record(d, [(20, 30)], 0)
    assert gaps.read(d).pairs() == [(5, 12), (20, 30)]
    gaps.record(d, [(40, 41)], 12)
    assert gaps.read(d).pairs() == [(20, 30), (40, 41)]
    assert not os.path.exists(compacted_path(d) + ".tmp")


@pytest.mark.parametrize("damage", ["flip", "truncate", "extend", "unsorted", "empty"])
def test_a_damaged_file_is_corrupt_naming_it(tmp_path, damage):
    d = str(tmp_path)
    gaps.write(d, [(1, 2), (5, 9)])
    path = compacted_path(d)
    raw = bytearray(open(path, "rb").read())
    if damage == "flip":
        raw[10] ^= 1
    elif damage == "truncate":
        raw = raw[:-5]
    elif damage == "extend":
        raw += b"\0"
    elif damage == "unsorted":
        raw = bytearray(gaps.encode([(5, 9), (1, 2)]))
    else:
        raw = bytearray()
    open(path, "wb").write(raw)
    with pytest.raises(CorruptLogError) as err:
        gaps.read(d)
    assert err.value.path == path
