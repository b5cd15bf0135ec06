"""Lookup by time (Kafka's offsetsForTimes): the first offset whose record's timestamp is at or
after a given one.

Three steps, none of which reads a segment whole: a binary search over the segments by the
timestamp of their last record (each segment's index header keeps it; a summary costs a stat and,
the first time, one read of the index), a binary search over that segment's index entries by the
timestamp in the header of the record each entry points at, then a scan of at most one index
interval (INDEX_INTERVAL bytes) plus whatever dead records, gaps or too-early records follow.

The answer is exact when timestamps never decrease along the log, which holds for the store's
own stamps (the wall clock at append, unless the caller gives one): a record before the one
returned is older. With a caller's timestamps that go back, the first segment whose last record
is late enough is the one searched, so an out-of-order late record in an earlier segment is
not found; the scan itself never returns a record older than asked for. Dead records (marked,
written dead, or in a compaction's gap) are never answers, as they are never read.

Functions over a SegmentList; thread-safe as it is.
"""

from __future__ import annotations

import bisect

from .. import record as rec
from ..errors import OffsetOutOfRangeError
from ..layout import index_path
from . import gapcheck, reading, seginfo
from .index import read_checkpoints
from .segment_list import ACTIVE, LIVE, SegmentList


def offset_for_time(segs: SegmentList, timestamp_ms: int) -> int | None:
    """The first offset kept whose live record's timestamp is at or after `timestamp_ms`;
    None when no record that late is kept (yet). See the module docstring for exactness."""
    if segs.readonly:
        segs.refresh()  # another process writes: its rolls; a writer's list is its own
    bases = list(segs.bases)
    if not bases:
        return None
    segs.marks.refresh()
    first = max(0, bisect.bisect_right(bases, segs.state.start_offset()) - 1)  # below: removed
    i = _first_late_segment(segs, bases, first, timestamp_ms)
    if i is None:
        return None
    try:
        found, resume = _search_segment(segs, bases[i], timestamp_ms)
    except OffsetOutOfRangeError:
        found, resume = None, bases[i]  # removed or merged meanwhile: the scan finds the way
    if found is not None:
        return found
    scan = reading.scan(segs, max(resume, segs.start()), None, False)
    try:
        for record in scan:  # every record of the segment was dead: the next live late one
            if record.timestamp_ms >= timestamp_ms:
                return record.offset
    finally:
        scan.close()
    return None


def _first_late_segment(segs: SegmentList, bases: list[int], first: int, timestamp_ms: int) -> int | None:
    """The lowest index i >= first whose segment's last record is at or after `timestamp_ms`
    (segments without records judged by the nearest one before them with records)."""
    last = len(bases) - 1
    i = bisect.bisect_left(range(len(bases)), True, lo=first,
                           key=lambda index: _late(segs, bases, first, index, last, timestamp_ms))
    return i if i <= last else None


def _late(segs: SegmentList, bases: list[int], first: int, index: int, last: int, timestamp_ms: int) -> bool:
    for j in range(index, first - 1, -1):
        try:
            last_ts = seginfo.info(segs, bases[j], last=j == last, keep=False).last_timestamp_ms
        except (FileNotFoundError, OffsetOutOfRangeError):
            continue  # removed or merged since the listing: its neighbours decide
        if last_ts is not None:
            return last_ts >= timestamp_ms
    return False


def _search_segment(segs: SegmentList, base: int, timestamp_ms: int) -> tuple[int | None, int]:
    """(the first live record of segment `base` at or after `timestamp_ms`, None if it has none;
    the offset after the last record read). Starts at the last index entry whose record is older
    (every record before it is older too) and decodes one record at a time from there."""
    with segs.hold_file(base) as (mm, ino):
        if mm is None:
            return None, base
        limit, kind, _ = segs.view_limits(base, mm, ino)
        gapcheck.check_place(segs, base, ino, mm)
        rel, pos = _entry_before(segs, base, mm, ino, limit, kind, timestamp_ms)
        offset = base + rel
        marks = segs.marks
        start = segs.start()
        while True:
            r = rec.decode_at(mm, pos, limit)
            if r.status != rec.OK:
                return None, offset
            attributes = r.attributes
            if attributes & rec.ATTR_GAP:
                offset += rec.gap_span(mm, r.value_start)
            else:
                offset += r.delta  # the offsets a compaction removed before this record
                if (not attributes & rec.ATTR_SKIP and r.timestamp_ms >= timestamp_ms and offset >= start
                        and not marks.is_marked(offset)):
                    return offset, offset
                offset += 1
            pos = r.next_position


def _entry_before(segs: SegmentList, base: int, mm, ino: int, limit: int, kind: int,
                  timestamp_ms: int) -> tuple[int, int]:
    """(relative offset, position) of the last index entry of the held segment `base` whose
    record is older than `timestamp_ms`; (0, 0) when none is."""
    if kind == ACTIVE:
        active = segs.active
        rels, positions = list(active.index.rels), list(active.index.positions)
    elif kind == LIVE:
        rels, positions = read_checkpoints(index_path(segs.segment_path(base)))
    else:
        summary = segs.summary(base, ino, mm)
        rels, positions = summary.rels, summary.positions
    def older(position: int) -> bool:  # not a gap (its timestamp is 0, no record's), and readable
        r = rec.decode_at(mm, position, limit)
        return r.status == rec.OK and not r.attributes & rec.ATTR_GAP and r.timestamp_ms < timestamp_ms

    # The first entry whose record is not known to be older; the one before it is a real, older record.
    lo = bisect.bisect_left(positions[:len(rels)], True, key=lambda position: not older(position))
    return (rels[lo - 1], positions[lo - 1]) if lo else (0, 0)
