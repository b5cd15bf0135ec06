"""The one scan from the last verifying checkpoint (commitlog/segments/sealed.py), over real bytes."""

from __future__ import annotations

import pytest

from commitlog import CorruptLogError
from commitlog import record as rec
from commitlog.segments.index import INDEX_INTERVAL
from commitlog.segments.sealed import live_summary, rebuilt_summary, scan_segment

SIZE = 64 * 1024


def _segment(n: int, value_len: int = 500) -> tuple[bytearray, list[int]]:
    buf = bytearray(SIZE)
    pos, starts = 0, []
    for i in range(n):
        data = rec.encode(bytes([i % 256]) * value_len, None, 1000 + i)
        buf[pos:pos + len(data)] = data
        starts.append(pos)
        pos += len(data)
    return buf, starts


def test_scans_from_the_start_and_keeps_the_writers_index_marks():
    buf, starts = _segment(40)
    s = scan_segment(buf, SIZE)
    assert (s.count, s.first_ts, s.last_ts, s.status) == (40, 1000, 1039, rec.EMPTY)
    assert s.position == starts[-1] + rec.HEADER_SIZE + 500
    # The first record at or after each INDEX_INTERVAL mark, as the writer adds them.
    expected, mark = [], INDEX_INTERVAL
    for i, p in enumerate(starts):
        if p >= mark:
            expected.append((i, p))
            mark = p + INDEX_INTERVAL
    assert list(zip(s.rels, s.positions)) == expected


def test_a_checkpoint_that_does_not_verify_is_dropped_and_the_scan_starts_earlier():
    buf, starts = _segment(40)
    rels, positions = [10, 20], [starts[10], starts[20] + 3]  # the second points mid-record
    s = scan_segment(buf, SIZE, rels, positions)
    assert s.count == 40 and s.rels[0] == 10
    assert starts[20] + 3 not in s.positions


def test_a_torn_tail_stops_the_scan_with_bad():
    buf, starts = _segment(10)
    buf[starts[9] + 30] ^= 0xFF
    s = scan_segment(buf, SIZE)
    assert (s.count, s.position, s.status) == (9, starts[9], rec.BAD)
    assert live_summary(buf, SIZE, [], []).record_count == 9
    with pytest.raises(CorruptLogError, match=f"at byte {starts[9]}"):
        rebuilt_summary(buf, SIZE, 0, "/x/00000000000000000000.log")


def test_the_end_marker_ends_a_sealed_segment():
    buf, starts = _segment(5)
    end = starts[-1] + rec.HEADER_SIZE + 500
    rec.LENGTH.pack_into(buf, end, rec.END_MARKER)
    s = scan_segment(buf, SIZE)
    assert (s.count, s.status) == (5, rec.END)
    summary = rebuilt_summary(buf, SIZE, 7, "/x/00000000000000000000.log")
    assert (summary.used_bytes, summary.record_count, summary.last_write_ns) == (end, 5, 7)


def test_an_empty_segment():
    s = scan_segment(None, 0)
    assert (s.count, s.position, s.status, s.first_ts) == (0, 0, rec.EMPTY, 0)
