"""Issue 34, items 8 and 12, for the JVM reader (jvm/src/.../SegmentCursor.java, walked by
DumpRecords): it reads the compaction record (commitlog.gaps) as the Python store does: a
compaction's gaps, at the head or between segments, are passed; retention's are reported; a
deleted middle segment fails the walk as CorruptLogError naming the range."""

from __future__ import annotations

import os

from store_gaps_helpers import compact_junk, java_walk, junk_log, live_offsets, walked

from commitlog import CommitLog
from commitlog.layout import index_path, segment_path


def test_the_jvm_reader_passes_a_compactions_gaps_at_the_head_and_between_segments(tmp_path):
    path = str(tmp_path / "log")
    bases, dead = junk_log(path, head=True)
    compact_junk(path)
    start, got, why = walked(java_walk(path, 0))            # was "stop REMOVED 0"
    assert start == 0 and why in ("EMPTY", "END")
    assert got == live_offsets(path) == [o for o in range(300) if o not in dead]
    assert walked(java_walk(path, bases[1] + 3))[1] == [o for o in got if o > bases[1]]


def test_the_jvm_reader_still_reports_retentions_gap(tmp_path):
    path = str(tmp_path / "log")
    bases, _ = junk_log(path)
    compact_junk(path)
    with CommitLog.open(path) as log:
        assert log.remove_head().status == "removed"
    proc = java_walk(path, 0)
    assert proc.stdout.splitlines() == [f"start {bases[2]}", "stop REMOVED 0"]


def test_the_jvm_reader_fails_on_a_deleted_middle_segment_naming_the_range(tmp_path):
    path = str(tmp_path / "log")
    bases, _ = junk_log(path)
    os.unlink(segment_path(path, bases[2]))
    os.unlink(index_path(segment_path(path, bases[2])))
    proc = java_walk(path, 0)
    assert proc.returncode != 0
    assert "CorruptLogError" in proc.stderr
    assert f"offsets [{bases[2]}, {bases[3]}) are missing" in proc.stderr
    assert segment_path(path, bases[3]) in proc.stderr


def test_the_jvm_reader_fails_on_a_first_segment_deleted_by_hand_naming_the_range(tmp_path):
    path = str(tmp_path / "log")
    bases, _ = junk_log(path)                               # nothing compacted: no record
    os.unlink(segment_path(path, bases[0]))
    os.unlink(index_path(segment_path(path, bases[0])))
    for start in (0, bases[1]):
        proc = java_walk(path, start)                       # was "start b1", then REMOVED 0
        assert proc.returncode != 0
        assert "CorruptLogError" in proc.stderr
        assert f"offsets [0, {bases[1]}) are missing" in proc.stderr
        assert segment_path(path, bases[1]) in proc.stderr
