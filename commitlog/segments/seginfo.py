"""What a segment is, as `CommitLog.segments()` describes it: its explicit end offset (a gap may
follow it after a compaction), its record and live bytes, and the dead bytes of the sealed ones.

Functions over a SegmentList (which keeps the summaries and their caches); thread-safe as the
SegmentList is.
"""

from __future__ import annotations

import bisect
import os

from ..errors import CorruptLogError, OffsetOutOfRangeError
from .segment import SegmentInfo
from .segment_list import SegmentList


def infos(segs: SegmentList) -> list[SegmentInfo]:
    """Every segment not logically removed, oldest first, as CommitLog.segments() gives them."""
    segs.refresh()
    with segs.meta_lock:
        bases = list(segs.bases)
    start = segs.state.start_offset()
    segs.marks.refresh()
    out = []
    covered = -1  # the end of the last segment listed: a base below it is a swap's leftover
    for i, base in enumerate(bases):
        if base < covered:
            continue
        nxt = bases[i + 1] if i + 1 < len(bases) else None
        if nxt is not None and nxt <= start:
            continue  # logically removed, its files not yet gone
        try:
            described = info(segs, base, last=nxt is None)
        except (FileNotFoundError, OffsetOutOfRangeError):
            continue  # removed by another process while we looked
        out.append(described)
        covered = described.end_offset
    return out


def info(segs: SegmentList, base: int, *, last: bool, validate: bool = False, keep: bool = True) -> SegmentInfo:
    """Segment `base` as CommitLog.segments() describes it, its end offset explicit (a gap
    may follow it). `last`: it is the log's last segment. With `validate`, a file of another
    size than segment_size must be a complete compacted segment (or the last, zero-length
    one): CorruptLogError otherwise. `keep`: cache the summary (False for a caller walking
    every segment once, which would otherwise hold every index in memory). Call
    `marks.refresh()` first. FileNotFoundError when it is gone."""
    path = segs.segment_path(base)
    st = os.stat(path)
    active = segs.active
    writable = last
    if active is not None and active.base_offset == base:
        s = active.summary()
    elif last:
        short = segs.short_summary(base, st.st_size)
        if validate and short is None and st.st_size not in (segs.segment_size, 0):
            raise CorruptLogError(path, None, f"segment is {st.st_size} bytes, expected {segs.segment_size} "
                                              f"(and it is not a complete sealed segment)")
        s = short or segs.live_summary(base)
        # Sealed short by a time-based roll (cut, or a crash came before the cut: its sealed index
        # says so): no writer appends to it again, so it is not active. A full-size one sealed by a
        # roll whose next segment a full disk refused stays active.
        writable = not s.compacted
    elif validate and st.st_size != segs.segment_size:
        s = segs.compacted_summary(base, st.st_size)
        if s is None:
            what = "zero-length" if st.st_size == 0 else f"{st.st_size} bytes"
            raise CorruptLogError(path, None, f"segment is {what}, expected {segs.segment_size} "
                                              f"(and it is not a complete sealed segment)")
    else:
        s = segs.summary(base) if keep else segs.light_summary(base, st)
    end = s.end_offset(base)
    marks = segs.marks
    dead = marks.dead_bytes(base, end, s.marks_seq) if marks.count else 0
    return SegmentInfo(base, path, st.st_size, s.used_bytes,
                       s.first_timestamp_ms if s.record_count else None,
                       s.last_timestamp_ms if s.record_count else None,
                       st.st_mtime, writable, s.record_count, max(0, s.used_bytes - dead))


def end_offset(segs: SegmentList, base: int) -> int:
    """As `CommitLog.segment_end_offset`: the offset after segment `base`'s last record."""
    active = segs.active
    if active is not None and active.base_offset == base:
        return active.end_offset
    return segs.live_summary(base).end_offset(base)


def checked_info(segs: SegmentList, base: int, *, last: bool) -> SegmentInfo:
    """As `CommitLog.segment_info`: `info` validated, its index not kept, FileNotFoundError when
    the segment is gone (removed between the lookup and the hold too)."""
    segs.marks.refresh()
    try:
        return info(segs, base, last=last, validate=True, keep=False)
    except OffsetOutOfRangeError:  # removed between the lookup and the hold
        raise FileNotFoundError(segs.segment_path(base)) from None


def dead_bytes(segs: SegmentList) -> int:
    """Framed bytes of the records marked dead in the sealed segments (not yet dropped by a
    compaction). Zero at the cost of one pread when nothing was ever marked; otherwise a stat
    per sealed segment, its index read once per file (a compaction's new file is read again)."""
    marks = segs.marks
    marks.refresh()
    if not marks.count:
        return 0
    segs.refresh()
    with segs.meta_lock:
        sealed = segs.bases[:-1]
    start = segs.state.start_offset()
    kept = []
    total = 0
    covered = -1
    for i, base in enumerate(sealed):
        if base < covered or (i + 1 < len(sealed) and sealed[i + 1] <= start):
            continue  # an interrupted swap's leftover, or logically removed
        try:
            s = segs.light_summary(base, os.stat(segs.segment_path(base)))
        except (FileNotFoundError, OffsetOutOfRangeError):
            continue  # removed by another process while we looked
        kept.append(base)
        end = s.end_offset(base)
        total += marks.dead_bytes(base, end, s.marks_seq)
        covered = end
    segs.summaries.keep_light_only(kept)
    return total


def dead_neighbourhoods(segs: SegmentList, select=None) -> list[SegmentInfo]:
    """The sealed segments holding records marked dead and not yet dropped that `select` picks
    (every one when None), each with the segments on either side of it, and
    the last segment; oldest first, each once. What a
    compaction plan needs without describing every segment: the fully live neighbours bound a
    merge exactly as in the whole list. Costs one listing and one walk of the marks, plus a stat
    per segment the marks may concern (those whose marks a compaction applied are passed over
    once described) and per segment returned. Segments without records are found only beside a
    dead one; a swap's leftover is passed where the segment before it is returned (as `infos`
    does), and a compaction refuses a run naming one it missed (it finishes swaps first)."""
    segs.refresh()
    with segs.meta_lock:
        bases = list(segs.bases)
    if not bases:
        return []
    marks = segs.marks
    marks.refresh()
    last = len(bases) - 1
    first = max(0, bisect.bisect_right(bases, segs.state.start_offset()) - 1)  # below: removed
    described: dict[int, SegmentInfo] = {}
    wanted = {last}
    for i, seq in sorted(marks.latest_by_segment(bases, first).items()):
        known = segs.summaries.known_marks_seq(bases[i])
        if i >= last or bases[i] in segs.leftovers or (known is not None and seq < known):
            continue  # the last is never compacted; the marks of a compacted one are applied
        try:
            found = described[i] = info(segs, bases[i], last=False, keep=False)
        except (FileNotFoundError, OffsetOutOfRangeError):
            continue  # removed by another process while we looked
        if found.live_bytes < found.used_bytes and (select is None or select(found)):
            wanted.update((i - 1, i, i + 1))
    out: list[SegmentInfo] = []
    covered, previous = -1, -2
    for i in sorted(w for w in wanted if first <= w <= last):
        base = bases[i]
        if base in segs.leftovers or (previous == i - 1 and base < covered):
            continue
        try:
            found = described.get(i) or info(segs, base, last=i == last, keep=False)
        except (FileNotFoundError, OffsetOutOfRangeError):
            continue
        out.append(found)
        covered, previous = found.end_offset, i
    return out
