"""Gaps between segment files, judged against what compactions recorded (commitlog.gaps): a
reader passes a compaction's gap silently and names any other gap, or two files claiming the same
offsets, as CorruptLogError. Functions over a SegmentList; read-only, thread-safe.
"""

from __future__ import annotations

import bisect

from .. import gaps
from ..errors import CorruptLogError, OffsetOutOfRangeError
from .segment_list import SegmentList


def retained_start(segs: SegmentList) -> int:
    """The first offset retention has not removed: the start offset, or above it where the gap
    before the first segment is not all a compaction's (taken for retention's: see commitlog.gaps).
    Offsets in [retained_start, segs.start()) were removed by compactions."""
    first = segs.start()
    start = segs.state.start_offset()
    if start >= first:
        return first
    return gaps.read(segs.path).covered_from(first, start)


def check_gap(segs: SegmentList, lo: int, hi: int, before: int | None, after: int) -> None:
    """CorruptLogError unless a compaction recorded removing [lo, hi), the offsets between the end
    of segment `before` (None: the gap is at the head) and segment `after`."""
    missing = gaps.read(segs.path).unrecorded(lo, hi)
    if missing is None:
        return
    where = "" if before is None else f" after {segs.segment_path(before)}"
    raise CorruptLogError(segs.segment_path(after), None,
                          f"offsets [{missing[0]}, {missing[1]}) are missing before this segment"
                          f"{where}: no compaction recorded removing them (a segment file deleted "
                          f"or renamed outside the store?)")


def overlap(segs: SegmentList, base: int, end: int, size: int, later: int) -> CorruptLogError:
    """The error for segment `later` starting below `end`, the end of the full-size segment
    `base` (only a compaction's shorter output may cover later files: its swap's leftovers)."""
    return CorruptLogError(segs.segment_path(later), None,
                           f"its name says offset {later}, but {segs.segment_path(base)} "
                           f"({size} bytes, not a compaction's output) holds offsets up to {end}: "
                           f"a segment file renamed outside the store?")


def check_previous(segs: SegmentList, base: int) -> None:
    """CorruptLogError when the segment before `base`, not a compaction's output, holds offsets
    at or past `base` (one of the two files was renamed)."""
    bases = segs.bases
    i = bisect.bisect_left(bases, base)
    if 0 < i < len(bases) and bases[i] == base:
        prev = bases[i - 1]
        try:
            summary = segs.summary(prev)
        except OffsetOutOfRangeError:
            return  # removed since this list was read (another handle's compaction, say)
        end = summary.end_offset(prev)
        if end > base and not summary.compacted:
            raise overlap(segs, prev, end, segs.segment_size, base)


def found_gaps(segs: SegmentList) -> list[tuple[int, int]]:
    """Every gap between the segment files (and before the first, from the start offset), for
    adopting the gaps of a log an older store compacted. Reads every sealed segment's summary."""
    segs.refresh()
    bases = list(segs.bases)
    out = []
    if bases and segs.state.start_offset() < bases[0]:
        out.append((segs.state.start_offset(), bases[0]))
    for base, nxt in zip(bases, bases[1:]):
        end = segs.summary(base).end_offset(base)
        if end < nxt:
            out.append((end, nxt))
    return out
