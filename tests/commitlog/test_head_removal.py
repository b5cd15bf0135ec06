"""Head removal: oldest first, never the last segment, the start offset advances before the rename,
interrupted removals are finished, held segments are reported (or forced), expected_base."""

from __future__ import annotations

import os
import subprocess

import pytest

from commitlog import CommitLog, OffsetOutOfRangeError, RemovalResult
from commitlog.segments.index import index_path
from commitlog.layout import DELETED_SUFFIX

from cl_helpers import spawn, wait_for_line

SEG = 4096
VALUE = b"v" * 979  # 1000 bytes framed: four records a segment


def _build(path: str, records: int = 21) -> list:
    with CommitLog.open(path, segment_size=SEG, flush="none") as log:
        for i in range(records):
            log.append(VALUE, key=b"%d" % i)
        return log.segments()


def test_removes_the_oldest_segment_and_advances_the_start_offset(tmp_log_dir):
    segs = _build(tmp_log_dir)
    assert [s.base_offset for s in segs] == [0, 4, 8, 12, 16, 20]
    with CommitLog.open(tmp_log_dir) as log, CommitLog.open(tmp_log_dir, readonly=True) as other:
        result = log.remove_head()
        assert result == RemovalResult("removed", 0, segs[0].path, SEG, False, 4)
        assert not os.path.exists(segs[0].path)
        assert not os.path.exists(index_path(segs[0].path))
        assert not any(n.endswith(DELETED_SUFFIX) for n in os.listdir(tmp_log_dir))
        for handle in (log, other):
            assert handle.start_offset == 4
            assert handle.segments()[0].base_offset == 4
            with pytest.raises(OffsetOutOfRangeError, match="now starts at offset 4") as ei:
                handle.read(3)
            assert ei.value.start_offset == 4
            with pytest.raises(OffsetOutOfRangeError):
                handle.scan(0)
            assert [r.offset for r in handle.scan()] == list(range(4, 21))
            assert handle.read(4).key == b"4"
        # And from the read-only handle (the sidecar's way), the next one.
        assert other.remove_head().base_offset == 4
        assert log.start_offset == 8
        assert log.append(VALUE) == 21
        assert [r.offset for r in log.scan()] == list(range(8, 22))
    with CommitLog.open(tmp_log_dir) as log:  # persisted
        assert log.start_offset == 8 and log.end_offset == 22


def test_never_removes_the_last_segment(tmp_log_dir):
    segs = _build(tmp_log_dir)
    with CommitLog.open(tmp_log_dir) as log:
        removed = []
        while (result := log.remove_head()).status == "removed":
            removed.append(result.base_offset)
        assert removed == [s.base_offset for s in segs[:-1]]
        assert result.status == "active" and result.base_offset == segs[-1].base_offset
        assert [s.base_offset for s in log.segments()] == [20]
        assert log.start_offset == 20 and log.end_offset == 21
        assert log.append(VALUE) == 21
        assert [r.offset for r in log.scan()] == [20, 21]


def test_remove_head_of_an_empty_log(tmp_log_dir):
    with CommitLog.open(tmp_log_dir, segment_size=SEG) as log:
        assert log.remove_head().status == "active"
        assert log.remove_head().base_offset is None
        assert log.append(b"x") == 0


def test_expected_base_mismatch_removes_nothing(tmp_log_dir):
    segs = _build(tmp_log_dir)
    with CommitLog.open(tmp_log_dir) as log:
        result = log.remove_head(expected_base=4)
        assert result.status == "mismatch" and result.base_offset == 0
        assert os.path.exists(segs[0].path) and log.start_offset == 0
        assert log.remove_head(expected_base=0).status == "removed"
        assert log.remove_head(expected_base=4).status == "removed"
        assert log.remove_head(expected_base=4).status == "mismatch"


def test_start_offset_advances_first_and_a_crash_before_the_rename_is_finished(tmp_log_dir):
    segs = _build(tmp_log_dir)
    with CommitLog.open(tmp_log_dir) as log:
        # The first step of a removal, then a crash before the rename: simulated directly.
        log._state.advance_start_offset(segs[1].base_offset)
    assert os.path.exists(segs[0].path)
    with CommitLog.open(tmp_log_dir, readonly=True) as reader:
        # Logically gone already: readers never see it, listings skip it.
        assert reader.start_offset == 4
        assert [s.base_offset for s in reader.segments()][0] == 4
        with pytest.raises(OffsetOutOfRangeError):
            reader.read(0)
        assert [r.offset for r in reader.scan()] == list(range(4, 21))
    with CommitLog.open(tmp_log_dir) as log:  # the writer's open finishes the removal
        assert not os.path.exists(segs[0].path)
        assert not os.path.exists(index_path(segs[0].path))
        assert log.start_offset == 4 and log.end_offset == 21


@pytest.mark.parametrize("finisher", ["finish_removals", "reopen", "remove_head"])
def test_leftover_deleted_files_are_finished(tmp_log_dir, finisher):
    segs = _build(tmp_log_dir)
    with CommitLog.open(tmp_log_dir) as log:
        log._state.advance_start_offset(4)
    # A crash after the rename, before the unlink.
    doomed = [segs[0].path + DELETED_SUFFIX, index_path(segs[0].path) + DELETED_SUFFIX]
    os.rename(segs[0].path, doomed[0])
    os.rename(index_path(segs[0].path), doomed[1])
    if finisher == "finish_removals":
        with CommitLog.open(tmp_log_dir, readonly=True) as log:  # any process may finish it
            done = log.finish_removals()
            assert sorted(done) == sorted(doomed)
            assert log.finish_removals() == []
    elif finisher == "reopen":
        with CommitLog.open(tmp_log_dir) as log:
            assert log.start_offset == 4
    else:
        with CommitLog.open(tmp_log_dir, readonly=True) as log:
            assert log.remove_head().base_offset == 4
    assert not any(os.path.exists(p) for p in doomed)
    with CommitLog.open(tmp_log_dir, readonly=True) as log:
        assert [r.offset for r in log.scan()][0] in (4, 8)


def test_deleted_suffix_on_foreign_names_is_left_alone(tmp_log_dir):
    _build(tmp_log_dir)
    keep = os.path.join(tmp_log_dir, "notes.txt" + DELETED_SUFFIX)
    with open(keep, "w") as f:
        f.write("not ours")
    with CommitLog.open(tmp_log_dir) as log:
        assert log.finish_removals() == []
    assert os.path.exists(keep)


def test_held_segment_is_reported_and_removed_only_when_forced(tmp_log_dir):
    segs = _build(tmp_log_dir)
    holder = spawn(f"holder({tmp_log_dir!r}, 1)", stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                   stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for_line(holder) == {"held": 1}
        with CommitLog.open(tmp_log_dir, readonly=True) as log:
            assert log.is_held(0) and not log.is_held(4)
            result = log.remove_head()
            assert result.status == "held" and result.base_offset == 0
            assert result.path == segs[0].path and result.bytes == SEG
            assert os.path.exists(segs[0].path) and log.start_offset == 0
            assert log.read(0).key == b"0"
            forced = log.remove_head(force=True)
            assert forced.status == "removed" and forced.forced and forced.base_offset == 0
            assert not os.path.exists(segs[0].path) and log.start_offset == 4
            assert not log.is_held(0)  # gone: nobody can hold it by name any more
        holder.stdin.write("go\n")
        holder.stdin.flush()
        # The holder reads on through the segment it holds (from its mapping), then the next.
        assert wait_for_line(holder) == {"read": [1, 2, 3, 4, 5, 6]}
        holder.wait(30)
        assert holder.returncode == 0, holder.stderr.read()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_a_scan_in_this_process_holds_its_segment_until_it_moves_on(tmp_log_dir):
    _build(tmp_log_dir)
    with CommitLog.open(tmp_log_dir) as log:
        it = log.scan()
        assert next(it).offset == 0
        assert log.is_held(0)
        assert log.remove_head().status == "held"
        for _ in range(4):  # into the next segment: the first is released
            next(it)
        assert not log.is_held(0) and log.is_held(4)
        assert log.remove_head().status == "removed"
        it.close()  # closing the scan releases the hold
        assert not log.is_held(4)
        assert log.remove_head().status == "removed"
