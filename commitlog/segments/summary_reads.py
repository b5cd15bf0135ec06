"""The summaries of segments that need more than their index to be read: a short file that may
be a compaction's output, and the last segment while another process writes it (kept between
calls in `SegmentSummaries.live_end`, commitlog.segments.last_segment_end).

Functions of a `SegmentList` (`segs`; not imported: the list imports this module), called through
its methods of the same names; thread-safe as the list is (files are opened, held and read
without its lock).
"""

from __future__ import annotations

import os

from . import last_segment_end
from .. import record as rec
from .index import SegmentSummary, read_checkpoints, read_sealed
from ..layout import index_path
from ..safeopen import no_follow
from .sealed import live_summary

__all__ = ["compacted_summary", "last_segment_summary"]


def compacted_summary(segs, base: int, size: int) -> SegmentSummary | None:
    """The summary of segment `base` if it is a complete compaction output: its index says
    so and names this very file, or (index stale or lost) its data verifies up to an end
    marker in its last four bytes. None for a torn or foreign file. One open file is
    judged (a compaction of another process may replace the name meanwhile); `size` is
    what a listing saw, superseded by the open file's."""
    path = segs.segment_path(base)
    try:
        f = open(path, "rb", opener=no_follow)
    except FileNotFoundError:
        return SegmentSummary(0, 0, 0, 0, 0)  # removed since the listing: nothing to judge
    with f:
        st = os.fstat(f.fileno())
        if st.st_size == segs.segment_size:
            return segs.summary(base, st.st_ino)  # replaced by a full-size file meanwhile
        summary = segs.summaries.read_index(base, st.st_ino)
        if summary is not None and summary.compacted:
            return summary if summary.used_bytes + rec.LENGTH_SIZE == st.st_size else None
        data = f.read()
    return segs.summaries.verified_compacted(data, st, path)


def last_segment_summary(segs, base: int) -> SegmentSummary:
    """Summary of the last segment written by another process: sealed index, or a scan."""
    path = segs.segment_path(base)
    kept = segs.summaries.live_end
    if kept is not None and kept.base != base:
        kept = None
    if kept is not None and last_segment_end.unchanged(kept, path):
        return kept.summary
    ipath = index_path(path)
    summary = read_sealed(ipath)
    if summary is not None:
        return summary
    ident = last_segment_end.file_id(path)
    with segs.hold(base) as mm:
        if kept is not None and kept.file_id == ident:
            rels, positions = [kept.rel], [kept.position]  # resume: appended since
        else:
            rels, positions = read_checkpoints(ipath)
        summary = live_summary(mm, len(mm) if mm is not None else 0, rels, positions)
        segs.summaries.live_end = last_segment_end.remember(base, ident, summary, mm, rels, positions)
    return summary
