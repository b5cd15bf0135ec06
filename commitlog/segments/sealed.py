"""Reading a segment's records without trusting its index: the one scan from the last checkpoint
that still verifies, and what recovery, a reader of another process's live segment and an index
rebuild make of it.

Pure functions over a mapping (or any bytes-like): thread- and process-safe.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from .. import record as rec
from ..errors import CorruptLogError
from ..layout import parse_segment_name
from .index import INDEX_INTERVAL, SegmentSummary


class SegmentScan(NamedTuple):
    """Where a scan of a segment stopped. Immutable.

    position: the byte after the last good record; count: offsets before it (records, their
    offset deltas, and the spans of a format-1 compacted segment's gap records); first_ts /
    last_ts: of record 0 and of the last good record (0 when there is none); status: what
    `decode_at` found at `position` (EMPTY, END or BAD); rels / positions: the index checkpoints
    that verified, extended by one every INDEX_INTERVAL bytes of the scanned tail."""

    position: int
    count: int
    first_ts: int
    last_ts: int
    status: int
    rels: list[int]
    positions: list[int]


def scan_segment(mm, size: int, rels: list[int] | None = None,
                 positions: list[int] | None = None) -> SegmentScan:
    """Scan `mm[:size]` from the last of the checkpoints (`rels`, `positions`: the index's
    relative offsets and byte positions) whose record still verifies; checkpoints after it are
    dropped (the lists are taken over). Without checkpoints, from the start."""
    rels = [] if rels is None else rels
    positions = [] if positions is None else positions
    decode = rec.decode_at
    gap = rec.ATTR_GAP
    while positions and decode(mm, positions[-1], size).status != rec.OK:
        rels.pop()
        positions.pop()
    count, pos = (rels[-1], positions[-1]) if positions else (0, 0)
    next_index = pos + INDEX_INTERVAL
    last_ts = 0
    while True:
        r = decode(mm, pos, size)
        if r.status != rec.OK:
            break
        if pos >= next_index:  # the same marks the writer's index keeps
            rels.append(count)
            positions.append(pos)
            next_index = pos + INDEX_INTERVAL
        if r.attributes & gap:
            count += rec.gap_span(mm, r.value_start)  # a format-1 compaction's gap: its span
        else:
            last_ts = r.timestamp_ms
            count += r.delta + 1  # and the offsets a compaction removed before it
        pos = r.next_position
    first_ts = 0
    if count:
        first = decode(mm, 0, size)
        while first.status == rec.OK and first.attributes & gap:  # a compacted segment's lead gap
            first = decode(mm, first.next_position, size)
        if first.status == rec.OK:
            first_ts = first.timestamp_ms
    return SegmentScan(pos, count, first_ts, last_ts, r.status, rels, positions)


def live_summary(mm, size: int, rels: list[int], positions: list[int]) -> SegmentSummary:
    """The summary of the last segment, written by another process, as far as written so far
    (no entries: a reader floors through the checkpoints it read itself)."""
    s = scan_segment(mm, size, rels, positions)
    return SegmentSummary(s.position, s.count, s.first_ts, s.last_ts, 0)


def rebuilt_summary(mm, size: int, mtime_ns: int, path: str) -> SegmentSummary:
    """A sealed segment's summary rebuilt from its data (its index was missing or damaged);
    CorruptLogError naming `path` when a record does not verify."""
    s = scan_segment(mm, size)
    if s.status == rec.BAD:
        base = parse_segment_name(os.path.basename(path))
        at = "" if base is None else f" (the record of offset {base + s.count}; its index is " \
            f"gone, so no record of this segment can be located)"
        raise CorruptLogError(path, s.position, f"record checksum or length does not verify{at}")
    return SegmentSummary(s.position, s.count, s.first_ts, s.last_ts, mtime_ns, tuple(s.rels),
                          tuple(s.positions))
