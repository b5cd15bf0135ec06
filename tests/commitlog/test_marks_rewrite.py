"""The marks file is bounded by what is live: entries whose records a compaction dropped (or whose
segments went) are forgotten by a crash-safe rewrite, readers of other handles follow it, marks
still protected by a compaction's rule stay, and a SIGKILL at any step of the rewrite loses no
mark and leaves a file the next marker finishes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from cl_helpers import child_env

from commitlog import CommitLog
from commitlog.cleanup.marks_shrink import STEP_ENTRIES
from commitlog.marks import ENTRY_SIZE, MARKS_STEP

SEGMENT = 4096


def _marked_log(path: str, records: int = 12_000) -> None:
    """Records of 40 bytes in 4 KiB segments, every other one marked (a mark_dead call each, so
    one entry each)."""
    with CommitLog.open(path, segment_size=SEGMENT, flush="none") as log:
        for i in range(records):
            log.append(b"%040d" % i)
        for o in range(1, records, 2):
            log.mark_dead([o])


def _compact_all(log: CommitLog, decide=None) -> None:
    log.compact([[s.base_offset] for s in log.segments()[:-1]],
                decide or (lambda o, k, t, marked: "dead" if marked else None))


def _offsets(path: str) -> list[int]:
    with CommitLog.open(path, readonly=True) as log:
        return [r.offset for r in log.scan()]


def test_a_compaction_forgets_the_marks_it_applied_and_other_handles_follow(tmp_path):
    path = str(tmp_path / "log")
    _marked_log(path)
    marks_file = os.path.join(path, "marks")
    before = os.path.getsize(marks_file)
    with CommitLog.open(path) as log, CommitLog.open(path, readonly=True) as reader:
        reader._segs.marks.refresh()
        assert len(reader._segs.marks.entries()) == 6_000 >= STEP_ENTRIES
        last = log.segments()[-1]
        _compact_all(log)
        left = log._segs.marks.entries()
        # Only the entries of the last (active) segment remain; the file shrank with them.
        assert left and all(start >= last.base_offset for start, _, _ in left)
        assert len(left) == len(range(last.base_offset | 1, last.end_offset, 2))
        assert os.path.getsize(marks_file) == MARKS_STEP < before        # one reserved step left
        assert [r.offset for r in reader.scan()] == list(range(0, 12_000, 2))
        # A mark after the rewrite reaches the reader opened before it.
        log.mark_dead([last.base_offset + (last.base_offset % 2 == 1)])
        assert last.base_offset + (last.base_offset % 2 == 1) not in [r.offset for r in reader.scan()]
        numbers = [seq for _, _, seq in reader._segs.marks.entries()]
        assert numbers == sorted(numbers) and numbers[0] >= 6_000    # numbers only grow
    with CommitLog.open(path, readonly=True) as log:
        assert [r.offset for r in log.scan()] == [o for o in range(0, 12_000, 2)
                                                  if o != last.base_offset + (last.base_offset % 2 == 1)]


def test_marks_a_compaction_kept_under_its_rule_are_not_forgotten(tmp_path):
    path = str(tmp_path / "log")
    _marked_log(path)
    with CommitLog.open(path) as log:
        protected = log.segments()[1]
        # A rule protecting segment 1's marked records (a job still writing there, say).
        _compact_all(log, lambda o, k, t, marked: None if protected.base_offset <= o < protected.end_offset
                     else ("dead" if marked else None))
        kept = [s for s, _, _ in log._segs.marks.entries() if s < protected.end_offset]
        assert kept == list(range(protected.base_offset | 1, protected.end_offset, 2))
    assert [o for o in _offsets(path) if o < protected.end_offset] == \
        list(range(0, protected.end_offset, 2))                  # still hidden from readers


def _shrink_child(path: str, kill_at: int) -> subprocess.CompletedProcess:
    code = f"import cx_helpers; cx_helpers.cx_shrink_marks({path!r}, {kill_at})"
    return subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True,
                          text=True, timeout=60)


def test_sigkill_at_every_step_of_a_rewrite_loses_no_mark(tmp_path):
    path = str(tmp_path / "log")
    _marked_log(path, records=1_200)                            # 600 entries: no rewrite on its own
    with CommitLog.open(path) as log:
        _compact_all(log)
        assert len(log._segs.marks.entries()) == 600
    expected = _offsets(path)
    reader = CommitLog.open(path, readonly=True)                 # open across every kill
    try:
        kill_at = 1
        while True:
            run = _shrink_child(path, kill_at)
            if run.returncode == 0:
                json.loads(run.stdout.splitlines()[-1])          # it reported
                break
            assert run.returncode == -9, run.stderr
            assert _offsets(path) == expected, f"killed at step {kill_at}"
            assert [r.offset for r in reader.scan()] == expected
            kill_at += 1
        # Every step was killed once; the last kill may have come after the rename (the
        # directory's fsync), leaving nothing to do.
        assert kill_at > 4
        with CommitLog.open(path) as log:
            end = log.end_offset
            assert len(log._segs.marks.entries()) < 600
            log.mark_dead([end - 2])                             # a marker after it all
        assert _offsets(path) == [o for o in expected if o != end - 2]
        assert end - 2 not in [r.offset for r in reader.scan()]
        assert not os.path.exists(os.path.join(path, "marks.tmp"))      # renamed in the end
    finally:
        reader.close()


def test_a_marker_finishes_a_rewrite_killed_between_moved_and_the_rename(tmp_path):
    path = str(tmp_path / "log")
    _marked_log(path, records=1_200)
    with CommitLog.open(path) as log:
        _compact_all(log)
    expected = _offsets(path)
    # pwrite of marks.tmp, fsync of it, pwrite of MOVED, fdatasync, then replace: killed at it.
    for kill_at in range(1, 10):
        run = _shrink_child(path, kill_at)
        assert run.returncode == -9
        with open(os.path.join(path, "marks"), "rb") as f:
            data = f.read()
        if any(data[i:i + 8] == b"\xff" * 8 and data[i + 16:i + 20] == b"\x02\0\0\0"
               for i in range(0, len(data), ENTRY_SIZE)):
            break                                                # MOVED written, not renamed
    else:
        raise AssertionError("no kill left MOVED without the rename")
    with CommitLog.open(path) as log:
        end = log.end_offset
        log.mark_dead([end - 2])
        # The marker finished the swap (the replacement the killed rewrite wrote, then its
        # own entry): the obsolete entries are gone.
        entries = log._segs.marks.entries()
        assert len(entries) < 600 and entries[-1][:2] == (end - 2, end - 1)
        assert not os.path.exists(os.path.join(path, "marks.tmp"))
    assert _offsets(path) == [o for o in expected if o != end - 2]


def test_a_shrink_racing_a_head_removal_keeps_the_entry_instead_of_failing(tmp_path):
    # mark_dead died with OffsetOutOfRangeError when another process removed a head segment
    # between the shrink's listing and its look at that segment (seen in the kill-and-restart run).
    from commitlog.cleanup.marks_shrink import obsolete_entries
    path = str(tmp_path / "log")
    with CommitLog.open(path, segment_size=SEGMENT, flush="none") as log:
        while len(log.segments()) < 4:
            log.append(b"x" * 100)
        second = log.segments()[1]
        log.mark_dead([second.base_offset + 1])
    with CommitLog.open(path, readonly=True) as reader:
        reader._segs.marks.refresh()
        [entry] = reader._segs.marks.entries()
        obsolete = obsolete_entries(reader._segs)           # the segments as listed now
        with CommitLog.open(path, readonly=True) as other:
            other.remove_head()
            other.remove_head()                             # the marked record's segment goes
        assert obsolete(*entry) is False                  # kept, decided again next time
