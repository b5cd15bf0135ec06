"""What each segment's index says about it, read once per file and kept: the sealed summaries
readers locate records with (index entries included), the light ones a pass walks every segment
for (entries left out: a full 64 MiB segment's are a megabyte), and the last segment's live end.

Every figure is kept with the inode of the file it describes: a compaction replaces a segment
under the same name, so a cached figure for another inode is not an answer. A summary is read
from the segment's index when the index describes this very file (`read_index`), and rebuilt from
the data otherwise (`rebuild`, which writes the index back when it can).

Thread-safe in the way `SegmentList` uses it: each dict operation is atomic, a racing reader at
worst reads the index again; what goes with a removed segment is dropped under the list's lock.
Process-safe: files are only read, and an index is written whole by rename (`write_sealed`).
"""

from __future__ import annotations

import dataclasses
import logging
import os

from .. import record as rec
from ..layout import index_path, segment_path
from . import last_segment_end
from .index import SegmentSummary, read_sealed, write_sealed
from .sealed import rebuilt_summary, scan_segment

log = logging.getLogger("commitlog")

_NONE = 1 << 63                      # the lowest base of an empty light cache


class SegmentSummaries:
    """See the module docstring."""

    def __init__(self, directory: str, segment_size: int, readonly: bool) -> None:
        self.path = directory
        self.segment_size = segment_size
        self.readonly = readonly
        self._full: dict[int, tuple[int | None, SegmentSummary]] = {}  # base -> (inode, summary)
        self._light: dict[int, tuple[int, int, SegmentSummary]] = {}   # base -> (inode, size, ...)
        self._light_min = _NONE
        self.live_end: last_segment_end.LiveEnd | None = None  # the last segment's end, kept (last_segment_end)

    # ------------------------------------------------------------------ reading files
    def read_index(self, base: int, ino: int | None = None) -> SegmentSummary | None:
        """The sealed index of `base` (the file `ino` when given, else the one named so now);
        None when missing, damaged, or describing another file: a compacted index naming
        another inode (a swap in progress or interrupted), or a plain index for a file that
        is not segment_size long (a compacted file whose new index is not in place)."""
        path = segment_path(self.path, base)
        summary = read_sealed(index_path(path))
        if summary is None:
            return None
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        if ino is None:
            ino = st.st_ino
        if summary.compacted:
            return summary if summary.data_ino == ino & 0xFFFFFFFF else None
        if ino == st.st_ino and st.st_size != self.segment_size:
            return None
        return summary

    def rebuild(self, base: int, ino: int, mm) -> SegmentSummary:
        """The summary of segment `base` from its data (`mm`, the held file `ino`), its index
        written back when this process may and the file is still the one held."""
        path = segment_path(self.path, base)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            st = None  # unlinked since we took hold (a compaction's swap): the mapping still reads
        summary = dataclasses.replace(  # the name's base: a renamed file's is its new name's
            rebuilt_summary(mm, len(mm), st.st_mtime_ns if st is not None else 0, path), base=base)
        if 0 < len(mm) < self.segment_size:  # a compaction's output, its index stale or lost
            summary = dataclasses.replace(summary, compacted=True, data_ino=ino & 0xFFFFFFFF)
        log.warning("rebuilt the index of %s (%d records)", path, summary.record_count)
        if not self.readonly and st is not None and st.st_ino == ino:
            try:
                write_sealed(index_path(path), summary)
                os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)
            except OSError as exc:  # a full disk, say: the summary in memory is still right
                log.warning("could not write the rebuilt index of %s: %s", path, exc)
        return summary

    def verified_compacted(self, data: bytes, st: os.stat_result, path: str) -> SegmentSummary | None:
        """The summary of a compaction output read whole (`data`, the file `st`) whose index is
        stale or lost: its records verify up to an end marker in its last four bytes. None for
        a torn or foreign file."""
        s = scan_segment(data, len(data))
        if s.status != rec.END or s.position + rec.LENGTH_SIZE != len(data):
            return None
        return dataclasses.replace(rebuilt_summary(data, len(data), st.st_mtime_ns, path),
                                   compacted=True, data_ino=st.st_ino & 0xFFFFFFFF)

    # ------------------------------------------------------------------ full summaries
    def cached(self, base: int, ino: int | None = None) -> SegmentSummary | None:
        """The summary kept for `base`, if it describes the file `ino` (any, when None)."""
        kept = self._full.get(base)
        if kept is None or (ino is not None and kept[0] != ino):
            return None
        return kept[1]

    def keep(self, base: int, ino: int | None, summary: SegmentSummary) -> None:
        """Keep `summary` of segment `base`, the file `ino` (None: the one named so now)."""
        self._full[base] = (ino if ino is not None else _ino(segment_path(self.path, base)), summary)

    # ------------------------------------------------------------------ light summaries
    def light(self, base: int, st: os.stat_result) -> SegmentSummary | None:
        """The light summary kept for `base`, if it describes the file `st`."""
        known = self._light.get(base)
        return known[2] if known is not None and known[:2] == (st.st_ino, st.st_size) else None

    def keep_light(self, base: int, st: os.stat_result, full: SegmentSummary) -> SegmentSummary:
        """Keep and return `full` without its index entries, for the file `st`."""
        light = dataclasses.replace(full, rels=(), positions=())
        self._light[base] = (st.st_ino, st.st_size, light)
        self._light_min = min(self._light_min, base)
        return light

    def keep_light_only(self, bases: list[int]) -> None:
        """Forget the light summaries of every segment but `bases` (those a full walk found)."""
        self._light = {b: self._light[b] for b in bases if b in self._light}
        self._light_min = min(self._light, default=_NONE)

    def known_marks_seq(self, base: int) -> int | None:
        """The marks sequence number a kept summary of `base` records (None: nothing kept).
        A compaction only raises it, so a stale figure errs towards re-examining the segment."""
        known = self._light.get(base)
        if known is not None:
            return known[2].marks_seq
        kept = self._full.get(base)
        return None if kept is None else kept[1].marks_seq

    # ------------------------------------------------------------------ forgetting
    def replaced(self, base: int) -> None:
        """Segment `base` was rewritten under the same name."""
        self._full.pop(base, None)

    def forget(self, base: int) -> None:
        """Segment `base` is gone."""
        self._full.pop(base, None)
        self._light.pop(base, None)

    def forget_below(self, first: int | None) -> None:
        """Segments below `first` are gone (every segment, when None)."""
        light = self._light
        if light and (first is None or self._light_min < first):  # a comparison per refresh
            for base in [b for b in light if first is None or b < first]:
                del light[base]
            self._light_min = min(light, default=_NONE)
        full = self._full
        if full and (first is None or min(full) < first):
            for base in [b for b in full if first is None or b < first]:
                del full[base]


def _ino(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None
