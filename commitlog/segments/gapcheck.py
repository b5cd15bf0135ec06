"""Gaps between segment files, judged against what compactions recorded (commitlog.gaps): a
reader passes a compaction's gap silently and names any other gap, or two files claiming the same
offsets, as CorruptLogError. Functions over a SegmentList; read-only, thread-safe.
"""

from __future__ import annotations

import bisect
import os

from .. import gaps
from ..errors import CorruptLogError, OffsetOutOfRangeError
from .index import SegmentSummary
from .segment_list import SegmentList


def retained_start(segs: SegmentList) -> int:
    """The first offset retention has not removed: the start offset, or above it where a
    compaction recorded removing the head segments (offsets in [retained_start, segs.start())).
    A gap before the first segment nobody recorded is CorruptLogError (`head_gap`), except on a
    log without `start.offset` (see commitlog.gaps): there it is taken for retention's."""
    first = segs.start()
    start = segs.state.start_offset()
    if start >= first:
        return first
    if segs.bases and head_gap(segs, segs.bases[0]) is not None:
        segs.refresh()  # judged again on a fresh listing: a removal or compaction since
        first, start = segs.start(), segs.state.start_offset()
        if start >= first:
            return first
        error = head_gap(segs, segs.bases[0]) if segs.bases else None
        if error is not None:
            raise error
    return gaps.read(segs.path).covered_from(first, start)


def head_gap(segs: SegmentList, first: int) -> CorruptLogError | None:
    """The error for offsets between the start offset and the first segment `first` that no
    compaction recorded removing. Head removal advances `start.offset` before it unlinks, so such
    a gap is nobody's; None on a log without that file (state.db era: its full-disk removal
    unlinked first) or with the gap recorded."""
    start = segs.state.start_offset()
    if start >= first or not segs.state.has_start_file():
        return None
    return gap_error(segs, start, first, None, first)


def check_gap(segs: SegmentList, lo: int, hi: int, before: int | None, after: int) -> None:
    """CorruptLogError unless a compaction recorded removing [lo, hi), the offsets between the end
    of segment `before` (None: the gap is at the head) and segment `after`."""
    error = gap_error(segs, lo, hi, before, after)
    if error is not None:
        raise error


def gap_error(segs: SegmentList, lo: int, hi: int, before: int | None, after: int) -> CorruptLogError | None:
    missing = gaps.read(segs.path).unrecorded(lo, hi)
    if missing is None:
        return None
    where = f" after {segs.segment_path(before)}" if before is not None else \
        f" (the start offset is {lo})"
    return CorruptLogError(segs.segment_path(after), None,
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


def check_place(segs: SegmentList, base: int, ino: int | None = None, mm=None) -> None:
    """CorruptLogError unless segment `base` sits where its neighbours say it does: the segment
    before it ends at `base`, or below it with the gap recorded (`check_gap`), or past it only as
    a compaction's output (its swap's leftovers); and its own end (the held file `ino`, mapped
    as `mm`; None: not held) is not past the next base unless it is a compaction's output (a gap
    after it is the next segment's to answer for: a file deleted there leaves this one right,
    one renamed up is refused when read). Every read path calls it once per segment it enters:
    a bisect and cached summaries, no per-record cost. A file renamed without its index (which
    records its base: commitlog.segments.index) is told by the gap or overlap it leaves. A
    mismatch is judged again on a fresh listing (another process's compaction may have changed
    the files since): the held file, replaced meanwhile, is an old one whose offsets still hold."""
    if _misplaced(segs, base, ino, mm, fresh=False) is None:
        return
    segs.refresh()
    error = _misplaced(segs, base, ino, mm, fresh=True)
    if error is not None:
        raise error


def _misplaced(segs: SegmentList, base: int, ino: int | None, mm, *, fresh: bool) -> CorruptLogError | None:
    bases = segs.bases
    i = bisect.bisect_left(bases, base)
    if i == len(bases) or bases[i] != base:
        return None
    if i == 0:
        error = head_gap(segs, base)
        if error is not None:
            return error
    else:
        prev = bases[i - 1]
        prev_ino = _inode(segs, prev) if fresh else None
        try:
            summary = None if fresh and prev_ino is None else segs.summary(prev, prev_ino)
        except (OffsetOutOfRangeError, FileNotFoundError):
            summary = None  # removed since this list was read (another handle's compaction, say)
        error = None if summary is None else _joint(segs, prev, summary, base)
        if error is not None:
            return error
    if mm is None or i + 1 == len(bases) or (fresh and _inode(segs, base) != ino):
        return None
    return _joint(segs, base, segs.summary(base, ino, mm), bases[i + 1], gaps=False)


def _joint(segs: SegmentList, base: int, summary: SegmentSummary, nxt: int, *,
           gaps: bool = True) -> CorruptLogError | None:
    """The error for the end of segment `base` (its `summary`) against the next base `nxt`: an
    overlap, or (`gaps`) an unrecorded gap."""
    end = summary.end_offset(base)
    if end > nxt and not summary.compacted:
        return overlap(segs, base, end, segs.segment_size, nxt)
    if gaps and end < nxt and (end, nxt) not in segs.passed_gaps:
        try:
            check_gap(segs, end, nxt, base, nxt)
        except CorruptLogError as error:
            return error
        segs.passed_gaps.add((end, nxt))  # recorded: a record is only ever pruned below the start
    return None


def _inode(segs: SegmentList, base: int) -> int | None:
    try:
        return os.stat(segs.segment_path(base)).st_ino
    except FileNotFoundError:
        return None


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
