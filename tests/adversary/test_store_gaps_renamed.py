"""Issue 34, item 8: a segment file renamed to another base (with its index, as the log-file fuzzer
does: seeds 15, 1020 and 1286 rename a segment one offset up, seed 184 seven up) is never read at
the offsets its name says. A sealed index records its segment's base, checked against the name
(commitlog.segments.index.read_sealed); without it (an index rebuilt, or an older one) every read
path entering a segment checks it against its neighbours: a point read, a scan starting inside it,
a time lookup (commitlog.segments.gapcheck.check_place)."""

from __future__ import annotations

import os

import pytest

from archive_reads_helpers import tier  # noqa: F401  (a fixture)
from store_gaps_helpers import SEG, compact_junk, junk_log, value

from commitlog import CommitLog, CorruptLogError
from commitlog.layout import index_path, segment_path


def timed_log(path: str, n: int = 120) -> list[int]:
    """Unkeyed records, offset o written at time 1000 + o ms; the bases (the last one active)."""
    with CommitLog.open(path, segment_size=SEG) as log:
        for o in range(n):
            log.append(value(o), timestamp_ms=1000 + o)
        return [s.base_offset for s in log.segments()]


def rename(path: str, base: int, to: int, *, index: bool = False) -> str:
    """Segment `base` moved to base `to`; its index moved with it (`index`, as the fuzzer's
    mutation does: the index records the base, so the file tells), or removed (rebuilt from the
    data, it has nothing to check against: only the neighbours tell)."""
    os.rename(segment_path(path, base), segment_path(path, to))
    if index:
        os.rename(index_path(segment_path(path, base)), index_path(segment_path(path, to)))
    else:
        os.unlink(index_path(segment_path(path, base)))
    return segment_path(path, to)


def moved(base: int, to: int) -> str:
    return rf"its name says offset {to}, but its index records base offset {base}"


def gap(lo: int, hi: int) -> str:
    return rf"offsets \[{lo}, {hi}\) are missing"


@pytest.mark.parametrize("shift", [1, 7])     # seeds 15, 1020, 1286 (one up); seed 184 (seven up)
def test_a_point_read_in_a_middle_segment_renamed_up_is_corrupt_naming_the_range(tmp_path, shift):
    path = str(tmp_path / "log")
    bases = timed_log(path)
    renamed = rename(path, bases[2], bases[2] + shift)
    with CommitLog.open(path, readonly=True) as log:
        for offset in (bases[2] + shift, bases[2] + shift + 3):   # was served value(offset - shift)
            with pytest.raises(CorruptLogError, match=gap(bases[2], bases[2] + shift)) as err:
                log.read(offset)
            assert err.value.path == renamed
        assert log.read(bases[1]).value == value(bases[1])      # the segment before still serves
        with pytest.raises(CorruptLogError, match="renamed"):     # the one after: which of the two
            log.read(bases[3])                                      # overlapping files is wrong?


def test_a_scan_starting_inside_a_segment_renamed_up_is_corrupt(tmp_path):
    path = str(tmp_path / "log")
    bases = timed_log(path)
    rename(path, bases[2], bases[2] + 1)
    with CommitLog.open(path, readonly=True) as log:
        for first in (bases[2] + 1, bases[2] + 4):                  # was served from the renamed file
            with pytest.raises(CorruptLogError, match=gap(bases[2], bases[2] + 1)):
                next(iter(log.scan(first, bases[3])))


def test_a_time_lookup_landing_in_a_renamed_segment_is_corrupt(tmp_path):
    path = str(tmp_path / "log")
    bases = timed_log(path)
    rename(path, bases[2], bases[2] + 1)
    with CommitLog.open(path, readonly=True) as log:
        assert log.offset_for_time(1000 + bases[1] + 2) == bases[1] + 2
        with pytest.raises(CorruptLogError, match=gap(bases[2], bases[2] + 1)):
            log.offset_for_time(1000 + bases[2] + 2)                # was bases[2] + 3


def test_a_segment_renamed_down_into_the_next_ones_place_is_corrupt_read_from_before(tmp_path):
    # One down: its end now overlaps nothing after it, but leaves a gap before the next file.
    path = str(tmp_path / "log")
    bases = timed_log(path)
    renamed = rename(path, bases[2], bases[2] - 1)
    with CommitLog.open(path, readonly=True) as log:
        with pytest.raises(CorruptLogError, match="renamed") as err:
            log.read(bases[2] + 2)
        assert err.value.path == renamed


def test_the_segment_before_a_renamed_one_is_still_served(tmp_path):
    # The gap [b2, b2+1) the rename leaves after it is the renamed file's to answer for.
    path = str(tmp_path / "log")
    bases = timed_log(path)
    rename(path, bases[2], bases[2] + 1)
    with CommitLog.open(path, readonly=True) as log:
        assert log.read(bases[1] + 1).value == value(bases[1] + 1)
        assert [r.offset for r in log.scan(bases[1], bases[2])] == list(range(bases[1], bases[2]))


def test_a_compactions_recorded_gap_still_passes_every_read_path(tmp_path):
    path = str(tmp_path / "log")
    bases, dead = junk_log(path)
    compact_junk(path)                                          # gaps [b1, b2) and [b3, b5)
    with CommitLog.open(path, readonly=True) as log:
        assert log.read(bases[2]).value == value(bases[2])
        assert log.read(bases[0] + 1).value == value(bases[0] + 1)
        assert [r.offset for r in log.scan(bases[2] + 1, bases[3])] == list(range(bases[2] + 1, bases[3]))
        assert log.read(bases[5]).offset == bases[5]


def test_a_segment_renamed_up_beside_a_compactions_gap_is_corrupt(tmp_path):
    # The gap before it is recorded, but its own end now overruns the next file's base.
    path = str(tmp_path / "log")
    bases, _ = junk_log(path)
    compact_junk(path)                                          # gaps [b1, b2) and [b3, b5)
    renamed = rename(path, bases[2], bases[2] + 1)
    with CommitLog.open(path, readonly=True) as log:
        with pytest.raises(CorruptLogError, match=gap(bases[2], bases[2] + 1)) as err:
            log.read(bases[2] + 2)
        assert err.value.path == renamed


@pytest.mark.parametrize("shift", [1, 7, -1])
def test_a_segment_renamed_with_its_index_is_corrupt_naming_the_file(tmp_path, shift):
    path = str(tmp_path / "log")
    bases = timed_log(path)
    renamed = rename(path, bases[2], bases[2] + shift, index=True)
    with CommitLog.open(path, readonly=True) as log:
        for read in (lambda: log.read(bases[2] + shift + 2), lambda: list(log.scan(bases[2] + shift + 1)),
                     lambda: log.offset_for_time(1000 + bases[2])):
            with pytest.raises(CorruptLogError, match=moved(bases[2], bases[2] + shift)) as err:
                read()
            assert err.value.path == renamed
        with pytest.raises(CorruptLogError, match="renamed outside the store") as err:
            list(log.scan())                      # the gap or overlap is met first, entering it
        assert err.value.path == renamed
        assert log.read(bases[0] + 1).value == value(bases[0] + 1)  # away from it: served


def test_the_first_segment_renamed_up_with_its_index_is_corrupt(tmp_path):
    # No neighbour before it: the gap [0, 1) is taken for retention's. Its index tells.
    path = str(tmp_path / "log")
    timed_log(path)
    renamed = rename(path, 0, 1, index=True)
    with CommitLog.open(path, readonly=True) as log:
        with pytest.raises(CorruptLogError, match=moved(0, 1)) as err:
            log.read(1)                                             # was served value(0)
        assert err.value.path == renamed


def test_an_archived_segment_moved_to_another_base_is_refused_by_its_index(tmp_path, tier):
    # The last entry's objects under keys one offset up, and the manifest saying so: the hole
    # before it reads as a compaction's, so only the index's recorded base tells.
    from archive_reads_helpers import archived_log, data_key, edit_manifest, index_key, put
    from commitlog import ArchiveCorruptError
    from commitlog.archive.tiered import ArchivedLog, archive_reader

    archived_log(tmp_path, tier, "ours")
    body = {}
    edit_manifest(tier, "ours", lambda b: body.update(b))
    last = body["segments"][-1]
    base = last["base_offset"]
    for key in (data_key, index_key):
        put(tier, key("ours", base + 1), tier.read(key("ours", base)))

    def move(b):
        b["segments"][-1].update(base_offset=base + 1, end_offset=last["end_offset"] + 1)
    edit_manifest(tier, "ours", move)
    log = ArchivedLog(archive_reader(tier, None, "ours"))
    with pytest.raises(ArchiveCorruptError, match=rf"records base offset {base}, the manifest's `base_offset` says {base + 1}"):
        log.read(base + 1)                                          # was the record of `base`
