"""Keeping the marks file bounded by what is live: once most of its entries cover offsets that
hold no record any more (removed with their segment, or dropped by a compaction that applied
them), it is rewritten with the others (commitlog.marks, `MarkSet.rewrite`, crash-safe).

An entry is forgotten only when no record it marks can exist: its range lies before the first
segment or after a segment's end (a gap), or in a compacted segment whose index says it applied
the entry (the entry's sequence number is below the one the compaction read) and kept no marked
record (FLAG_KEPT_MARKED: a rule may protect a marked record, which must stay hidden). Before the
first segment of a log with an archive tier, only an entry before the archive's start is forgotten. The last
segment's entries always stay. Tried after a compaction (under its lock) and when `mark_dead`
fills another reserved step of the file (if no compaction holds the lock then), so a pass over
the entries is paid once per MARKS_STEP of growth. Functions over a SegmentList.
"""

from __future__ import annotations

import bisect
import logging
import os
from collections.abc import Callable

from ..errors import OffsetOutOfRangeError, StoreFullError
from ..archive.log_archive import cached_manifest
from ..marks import ENTRY_SIZE, MARKS_STEP
from ..segments.segment_list import SegmentList

log = logging.getLogger("commitlog")
STEP_ENTRIES = MARKS_STEP // ENTRY_SIZE    # 2,730: no rewrite below it, and tried once per step


def obsolete_entries(segs: SegmentList) -> Callable[[int, int, int], bool]:
    """`(start, end, seq) -> True` for an entry no record can need any more (module docstring).
    Below the first segment, a log with an archive tier keeps the entries its archive may still
    hold records of (from the archive's start on): a tiered read hides them there too."""
    bases = list(segs.bases)
    archived = cached_manifest(segs.path, os.path.basename(segs.path))
    kept_from = archived.start_offset if archived is not None else None

    def obsolete(start: int, end: int, seq: int) -> bool:
        i = bisect.bisect_right(bases, start) - 1
        if i < 0:
            return kept_from is None or end <= kept_from   # removed, and not in the archive either
        if i == len(bases) - 1:
            return False                         # the last segment: maybe still written
        base = bases[i]
        try:
            summary = segs.summary(base)
        except (FileNotFoundError, OffsetOutOfRangeError):
            return False                         # changed or removed meanwhile: keep, decide next time
        seg_end = summary.end_offset(base)
        if start >= seg_end:
            return True                          # in a gap: its records went with a compaction
        return (summary.compacted and not summary.kept_marked and seq < summary.marks_seq
                and end <= seg_end)

    return obsolete


def shrink_marks(segs: SegmentList, *, force: bool = False) -> tuple[int, int] | None:
    """Rewrite the marks file without its obsolete entries when they are most of it (at least
    STEP_ENTRIES entries in all), or with `force` whenever one is obsolete; (entries before,
    after) when it was rewritten, else None. The caller holds the compaction lock."""
    marks = segs.marks
    marks.refresh()
    entries = marks.entries()
    if not force and len(entries) < STEP_ENTRIES:
        return None
    segs.refresh()
    obsolete = obsolete_entries(segs)
    gone = {seq for start, end, seq in entries if obsolete(start, end, seq)}
    if not gone or (not force and len(gone) * 2 <= len(entries)):
        return None
    try:  # each entry judged once: one read since (a later sequence number) stays
        return marks.rewrite(lambda start, end, seq: seq not in gone)
    except (OSError, StoreFullError) as exc:  # a full disk: the old file stays whole, in use
        log.warning("could not rewrite %s without its %d obsolete entries: %s", marks.path, len(gone), exc)
        return None
