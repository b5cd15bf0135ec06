"""mark_dead and the marks file (commitlog.marks): readers skip marked records, marks are durable
and shared by processes, live bytes follow them, bad input changes nothing."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest

from cl_helpers import child_env, value_for

from commitlog import CommitLog, InvalidArgumentError, OffsetRemovedError, StoreFullError
from commitlog import record as rec
from commitlog.layout import marks_path
from commitlog.marks import ENTRY_SIZE, MARKS_STEP, MarkSet

SEG = 16 * 1024


def fill(log: CommitLog, n: int) -> None:
    for o in range(log.end_offset, log.end_offset + n):
        log.append(value_for(o, 300), key=b"k%d" % (o % 5) if o % 2 else None)


def test_marked_records_are_never_returned_and_live_bytes_drop_by_their_size(tmp_path):
    path = str(tmp_path / "log")
    with CommitLog.open(path, segment_size=SEG) as log:
        fill(log, 300)
        first = log.segments()[0]
        assert first.live_bytes == first.used_bytes and first.live_ratio == 1.0
        doomed = [3, 4, 5, 40, first.end_offset + 2]
        sizes = {r.offset: len(rec.encode(bytes(r.value), r.key, r.timestamp_ms)) for r in log.scan()}
        assert log.mark_dead(doomed) == 5
        assert log.mark_dead([4, 5, 6]) == 1  # 4 and 5 were dead already
        dead = set(doomed) | {6}
        assert [r.offset for r in log.scan()] == [o for o in range(300) if o not in dead]
        assert [r.offset for r in log.scan(3, 8)] == [7]
        with pytest.raises(OffsetRemovedError, match="offset 4 was marked dead; the next offset "
                                                     "that still exists is 7") as err:
            log.read(4)
        assert err.value.next_offset == 7
        infos = log.segments()
        assert infos[0].used_bytes - infos[0].live_bytes == sum(sizes[o] for o in (3, 4, 5, 6, 40))
        assert infos[1].used_bytes - infos[1].live_bytes == sizes[first.end_offset + 2]
        fill(log, 5)
    with CommitLog.open(path, readonly=True) as log:  # durable, and seen by another open
        assert [r.offset for r in log.scan()] == [o for o in range(305) if o not in dead]
        assert log.segments()[0].live_bytes == infos[0].live_bytes


def test_bad_offsets_are_refused_and_mark_nothing(tmp_path):
    with CommitLog.open(str(tmp_path / "log"), segment_size=SEG) as log:
        fill(log, 20)
        for bad, what in (([1, 20], "offset 20 .* not written yet"), ([-1], "ints >= 0"),
                          (["3"], "ints >= 0"), ([True], "ints >= 0"), (5, "iterable"),
                          (range(-2, 3), "ints >= 0")):
            with pytest.raises(InvalidArgumentError, match=what):
                log.mark_dead(bad)
        assert len(list(log.scan())) == 20
        assert not os.path.exists(marks_path(log.path))  # created by the first mark
        assert log.mark_dead([]) == 0 and log.mark_dead(range(5, 8)) == 3


def test_a_torn_entry_is_ignored_and_overwritten_by_the_next_mark(tmp_path):
    path = str(tmp_path / "log")
    with CommitLog.open(path, segment_size=SEG) as log:
        fill(log, 50)
        log.mark_dead([1])
    with open(marks_path(path), "r+b") as f:  # a crash in the middle of the second entry
        f.seek(ENTRY_SIZE)
        f.write(b"\x07" * (ENTRY_SIZE - 5))
    with CommitLog.open(path) as log:
        assert [r.offset for r in log.scan(0, 4)] == [0, 2, 3]
        assert log.mark_dead([2]) == 1
        assert [r.offset for r in log.scan(0, 4)] == [0, 3]
    with CommitLog.open(path, readonly=True) as log:
        assert [r.offset for r in log.scan(0, 4)] == [0, 3]


MARKER = """
import sys
from commitlog import CommitLog
path, parity = sys.argv[1], int(sys.argv[2])
with CommitLog.open(path, readonly=True) as log:
    n = 0
    for start in range(0, 2000, 50):
        n += log.mark_dead([o for o in range(start, start + 50) if o % 2 == parity])
print(n)
"""


def test_two_processes_mark_at_once_beside_a_running_writer(tmp_path):
    path = str(tmp_path / "log")
    with CommitLog.open(path, segment_size=SEG) as log:  # the writer stays open meanwhile
        fill(log, 2000)
        procs = [subprocess.Popen([sys.executable, "-c", MARKER, path, str(p)], env=child_env(),
                                  stdout=subprocess.PIPE, text=True) for p in (0, 1)]
        fill(log, 100)
        counts = [int(p.communicate(timeout=60)[0]) for p in procs]
        assert counts == [1000, 1000]
        assert [r.offset for r in log.scan()] == list(range(2000, 2100))
        assert all(s.live_bytes == 0 for s in log.segments() if s.end_offset <= 2000)
        assert log.mark_dead(range(0, 2000)) == 0


def _fill_up(path: str) -> None:
    """Write `path` until the filesystem is full (the write, or the close's flush, fails)."""
    with pytest.raises(OSError):
        with open(path, "wb") as f:
            while True:
                f.write(bytes(4096))
                f.flush()


def test_marking_works_on_a_full_disk_until_the_reserved_step_is_used(small_fs):
    path = os.path.join(small_fs, "log")
    with CommitLog.open(path, segment_size=64 * 1024, refuse_writes_ratio=None) as log:
        fill(log, 6000)
        log.mark_dead([0])  # reserves the first step of the marks file
        # Until the disk is full: the write fails, and closing may fail again flushing its buffer.
        with pytest.raises(OSError):
            with open(os.path.join(small_fs, "ballast"), "wb") as f:
                while True:
                    f.write(bytes(1 << 16))
                    f.flush()
        # The disk is full: marks still go into the reserved step, one entry each.
        for o in range(2, 2 + 2 * (MARKS_STEP // ENTRY_SIZE - 1), 2):
            log.mark_dead([o])
        _fill_up(os.path.join(small_fs, "ballast-2"))   # whatever the store let go of meanwhile
        with pytest.raises(StoreFullError, match="no space left to record marks"):
            log.mark_dead([1])
        assert not any(r.offset == 2 for r in log.scan()) and log.read(1).offset == 1


def test_tombstones_first_seen_keep_their_earliest_time_across_processes_and_a_torn_entry(tmp_path):
    path = str(tmp_path / "log")
    with CommitLog.open(path, segment_size=SEG) as log:
        fill(log, 20)
        assert log.tombstones_first_seen() == {}
        assert log.note_tombstones({3: 100.0, 7: 200.0}) == 2
        assert log.note_tombstones({3: 999.0, 9: 300.0}) == 1  # 3 keeps its first time
    with open(os.path.join(path, "tombstones"), "ab") as f:
        f.write(b"\x01" * 11)  # a crash in the middle of an entry
    code = (f"from commitlog import CommitLog\n"
            f"with CommitLog.open({path!r}, readonly=True) as log:\n"
            f"    print(log.note_tombstones({{11: 400.0}}), sorted(log.tombstones_first_seen().items()))\n")
    out = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True,
                         text=True, timeout=60).stdout
    assert out.strip() == "1 [(3, 100.0), (7, 200.0), (9, 300.0), (11, 400.0)]"


def test_dead_bytes_counts_marked_records_of_sealed_segments_until_compaction_or_removal(tmp_path):
    path = str(tmp_path / "log")
    value = b"v" * 979                                   # 1000 bytes framed: four records a segment
    with CommitLog.open(path, segment_size=4096, flush="none") as log:
        for _ in range(14):
            log.append(value)                            # segments 0, 4, 8, active 12
        assert log.dead_bytes() == 0                     # never marked: no marks file at all
        log.mark_dead([1, 2, 5, 13])                     # 13 is in the active segment: not counted
        with CommitLog.open(path, readonly=True) as other:  # another process sees the same
            assert other.dead_bytes() == log.dead_bytes() == 3000
        log.mark_dead([2, 6, 9])                         # 2 again: counted once
        assert log.dead_bytes() == 5000
        assert sum(s.used_bytes - s.live_bytes for s in log.segments()[:-1]) == 5000
        log.compact([[4]], lambda o, k, t, m: "dead" if m else None, marks=log.marks_snapshot())
        assert log.dead_bytes() == 3000                  # 5 and 6 dropped by the rewrite
        log.mark_dead([4])                               # marked after the compaction: counts
        assert log.dead_bytes() == 4000
        assert log.remove_head().base_offset == 0        # 1 and 2 left with their segment
        assert log.dead_bytes() == 2000


def _expected_neighbourhoods(full):
    """From the whole listing: dead sealed segments with their neighbours, and the last."""
    wanted = {len(full) - 1}
    for i, s in enumerate(full[:-1]):
        if s.live_bytes < s.used_bytes:
            wanted.update((i - 1, i, i + 1))
    return [full[i] for i in sorted(w for w in wanted if 0 <= w < len(full))]


def test_segments_with_dead_are_the_dead_sealed_ones_with_neighbours_as_the_full_listing_says(tmp_path):
    path = str(tmp_path / "log")
    with CommitLog.open(path, segment_size=SEG) as log:
        fill(log, 1200)
        assert [s.base_offset for s in log.segments_with_dead()] == [log.segments()[-1].base_offset]
        full = log.segments()
        log.mark_dead([full[2].base_offset + 1, full[7].base_offset, full[8].end_offset - 1])
        for step in range(3):
            with CommitLog.open(path, readonly=True) as other:  # nothing cached: every mark examined
                assert other.segments_with_dead() == _expected_neighbourhoods(other.segments())
            got = log.segments_with_dead()
            full = log.segments()
            assert got == _expected_neighbourhoods(full)
            if step == 0:  # compacting drops the marks: the segment is no longer returned
                log.compact([[full[2].base_offset]], lambda o, k, t, m: "dead" if m else None)
            elif step == 1:  # a compacted segment (marks applied) marked again is returned again
                log.mark_dead([full[2].base_offset + 3])
        assert full[2].base_offset in [s.base_offset for s in got]
        fill(log, 30)
        log.mark_dead([log.end_offset - 1])  # the last segment: never a candidate, returned once
        assert log.segments_with_dead() == _expected_neighbourhoods(log.segments())


def test_segments_with_dead_that_a_policy_selects_leave_out_the_mostly_live_ones(tmp_path):
    with CommitLog.open(str(tmp_path / "log"), segment_size=SEG) as log:
        fill(log, 1200)
        full = log.segments()
        mostly_live, mostly_dead = full[3], full[8]
        log.mark_dead([mostly_live.base_offset])
        log.mark_dead(range(mostly_dead.base_offset, mostly_dead.end_offset - 5))
        asked = []

        def below_half(info):
            asked.append(info.base_offset)
            return info.live_bytes < 0.5 * info.used_bytes
        bases = [s.base_offset for s in log.segments_with_dead(select=below_half)]
        assert bases == [full[7].base_offset, mostly_dead.base_offset, full[9].base_offset,
                         full[-1].base_offset]
        assert sorted(asked) == [mostly_live.base_offset, mostly_dead.base_offset]  # dead ones only
        assert mostly_live.base_offset in [s.base_offset for s in log.segments_with_dead()]
        for bad in (0.5, "x", True):
            with pytest.raises(InvalidArgumentError, match="select must be a function"):
                log.segments_with_dead(select=bad)


@pytest.mark.parametrize("seed", range(4))
def test_marks_in_any_order_read_back_as_the_same_merged_ranges_and_entries(tmp_path, seed):
    # Marks mostly in order (the reader's fast path appends them), some before earlier ones,
    # overlapping or touching them (bisected in): the marker's own cache and a reader's first
    # read of the whole file hold the same disjoint, merged ranges, and the entries by start.
    rng = random.Random(seed)
    path = str(tmp_path / "marks")
    open(path, "wb").close()
    marker, marked, pieces = MarkSet(path), set(), []

    def measure(runs):
        return [(lo, hi, hi - lo, hi - lo) for lo, hi in runs]

    at = 0
    for _ in range(400):
        if rng.random() < 0.8:
            lo = at + rng.choice([0, 0, 1, 3])           # touching the last run, or just past it
        else:
            lo = rng.randrange(0, at + 1)                # somewhere before: overlapping or not
        hi = lo + rng.randint(1, 6)
        fresh = [o for o in range(lo, hi) if o not in marked]
        assert marker.mark([(lo, hi)], measure) == len(fresh)
        pieces += _runs_of(fresh)
        marked.update(range(lo, hi))
        at = max(at, hi)
    reader = MarkSet(path)
    reader.refresh()
    for cache in (marker, reader):
        assert all(e < s for e, s in zip(cache.ends, cache.starts[1:])), "disjoint, merged, sorted"
        assert [o for o in range(at + 2) if cache.is_marked(o)] == sorted(marked)
        assert [e[0] for e in cache._entries] == sorted(e[0] for e in cache._entries)
        assert sorted((e[0], e[3]) for e in cache._entries) == sorted(pieces)
        assert cache.dead_bytes(0, at + 1) == len(marked)
    assert (reader.starts, reader.ends, reader._entries) == (marker.starts, marker.ends, marker._entries)


def _runs_of(offsets):
    """Sorted offsets as [start, end) runs: the pieces a mark writes as entries."""
    runs = []
    for o in offsets:
        if runs and runs[-1][1] == o:
            runs[-1][1] = o + 1
        else:
            runs.append([o, o + 1])
    return [tuple(r) for r in runs]
