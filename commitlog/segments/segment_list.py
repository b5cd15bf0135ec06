"""The ordered segment list of an open log: base offsets oldest first, what each sealed segment's
index says about it (cached), the segment this process writes, and the holds readers take.

A segment's end offset comes from its summary (`SegmentSummary.end_offset`), never from the next
base: compaction leaves gaps, and a compacted segment is smaller than segment_size (see
commitlog.cleanup.swap for the swap and how a compacted file is told apart from a torn one). A reader
holding a replaced file keeps its descriptor and mapping until it lets go.

State kept per segment lives only here, and goes when its segment goes: `forget_below` drops the
bases and summaries of segments another process removed from the head (a long-running writer
whose head a sidecar removes would otherwise keep both forever).

Thread-safe: the list changes under `meta_lock`; readers take a snapshot of `bases`.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import logging
import os
import threading
from collections.abc import Iterator

from . import liveend
from .active import ActiveSegment
from ..errors import CorruptLogError, OffsetOutOfRangeError
from .. import record as rec
from .index import SegmentSummary, read_checkpoints, read_sealed, write_sealed
from ..layout import SegmentListing, index_path, list_segments, marks_path, segment_path
from ..locks import SegmentHolds
from ..marks import MarkSet
from .sealed import live_summary, rebuilt_summary, scan_segment
from ..state import LogState

log = logging.getLogger("commitlog")

SEALED, ACTIVE, LIVE = 0, 1, 2       # how a reader sees a segment (see view_limits)


class SegmentList:
    """See the module docstring."""

    def __init__(self, directory: str, segment_size: int, state: LogState, readonly: bool) -> None:
        self.path = directory
        self.segment_size = segment_size
        self.state = state
        self.readonly = readonly
        self.meta_lock = threading.Lock()
        self.holds = SegmentHolds()
        self.marks = MarkSet(marks_path(directory))
        self.bases: list[int] = []
        self.summaries: dict[int, SegmentSummary] = {}
        self._inos: dict[int, int] = {}  # base -> inode number of the file summarised
        self.active: ActiveSegment | None = None  # set by the writer only
        self.tail_end = 0  # the end offset while there is no active segment
        self._live_end: liveend.LiveEnd | None = None  # the last segment's end, kept (liveend)
        # Bases of an interrupted swap's leftovers found at a read-only open (commitlog.cleanup.swap):
        # superseded by the compacted segment before them, never located by a read.
        self.leftovers: set[int] = set()
        # base -> (inode, size, summary without index entries) of sealed segments, for `info`
        # and `dead_bytes` callers that walk every segment each pass: not the entries
        # `summaries` holds (a megabyte for a full 64 MiB segment). A sealed file changes only
        # by a compaction's swap, which gives it another inode.
        self._facts: dict[int, tuple[int, int, SegmentSummary]] = {}
        self._facts_min = 1 << 63

    # ------------------------------------------------------------------ listing
    def segment_path(self, base: int) -> str:
        return segment_path(self.path, base)

    def list(self, *, validate: bool = False) -> SegmentListing:
        """One scan of the directory; with `validate`, every segment's size is checked too (a
        compacted segment is smaller, and must be a complete one: see `compacted_summary`)."""
        listing = list_segments(self.path, stat_head=None if validate else 0)
        if validate:
            segs = listing.segments
            for i, seg in enumerate(segs):
                if seg.size == self.segment_size or (i == len(segs) - 1 and seg.size == 0):
                    continue
                if seg.size < self.segment_size and self.compacted_summary(seg.base_offset, seg.size):
                    continue
                what = "zero-length" if seg.size == 0 else f"{seg.size} bytes"
                raise CorruptLogError(seg.path, None,
                                      f"segment is {what}, expected {self.segment_size} (and it "
                                      f"is not a complete compacted segment)")
        return listing

    def compacted_summary(self, base: int, size: int) -> SegmentSummary | None:
        """The summary of segment `base` if it is a complete compaction output: its index says
        so and names this very file, or (index stale or lost) its data verifies up to an end
        marker in its last four bytes. None for a torn or foreign file. One open file is
        judged (a compaction of another process may replace the name meanwhile); `size` is
        what a listing saw, superseded by the open file's."""
        path = self.segment_path(base)
        try:
            f = open(path, "rb")
        except FileNotFoundError:
            return SegmentSummary(0, 0, 0, 0, 0)  # removed since the listing: nothing to judge
        with f:
            st = os.fstat(f.fileno())
            if st.st_size == self.segment_size:
                return self.summary(base, st.st_ino)  # replaced by a full-size file meanwhile
            summary = self._read_index(base, st.st_ino)
            if summary is not None and summary.compacted:
                return summary if summary.used_bytes + rec.LENGTH_SIZE == st.st_size else None
            data = f.read()
        s = scan_segment(data, len(data))
        if s.status != rec.END or s.position + rec.LENGTH_SIZE != len(data):
            return None
        return dataclasses.replace(rebuilt_summary(data, len(data), st.st_mtime_ns, path),
                                   compacted=True, data_ino=st.st_ino & 0xFFFFFFFF)

    def _read_index(self, base: int, ino: int | None = None) -> SegmentSummary | None:
        """The sealed index of `base` (the file `ino` when given, else the one named so now);
        None when missing, damaged, or describing another file: a compacted index naming
        another inode (a swap in progress or interrupted), or a plain index for a file that
        is not segment_size long (a compacted file whose new index is not in place)."""
        path = self.segment_path(base)
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

    def refresh(self) -> None:
        """Re-read the list from the directory (other processes add and remove segments)."""
        bases = list(self.list().bases)
        if self.leftovers:
            self.leftovers.intersection_update(bases)  # gone once a writer's open removed them
            bases = [b for b in bases if b not in self.leftovers]
        with self.meta_lock:
            active = self.active
            if active is not None and active.base_offset not in bases:
                bases.append(active.base_offset)
                bases.sort()
            self.bases = bases
            self._drop_summaries_below(bases[0] if bases else None)

    def add(self, base: int) -> None:
        with self.meta_lock:
            if not self.bases or self.bases[-1] < base:
                self.bases.append(base)

    def forget(self, base: int) -> None:
        """Segment `base` is gone: drop what is kept about it."""
        with self.meta_lock:
            if base in self.bases:
                self.bases.remove(base)
            self.summaries.pop(base, None)
            self._inos.pop(base, None)
            self._facts.pop(base, None)

    def replaced(self, base: int) -> None:
        """Segment `base` was rewritten under the same name: drop what was cached about it."""
        with self.meta_lock:
            self.summaries.pop(base, None)
            self._inos.pop(base, None)

    def forget_below(self, start_offset: int) -> None:
        """Drop the segments logically removed (their successor starts at or below
        `start_offset`), wherever the removal ran. Called by the writer at each roll."""
        with self.meta_lock:
            bases = self.bases
            i = 0
            while i + 1 < len(bases) and bases[i + 1] <= start_offset:
                i += 1
            if i:
                del bases[:i]
            self._drop_summaries_below(bases[0] if bases else None)

    def _drop_summaries_below(self, first: int | None) -> None:
        facts = self._facts
        if facts and (first is None or self._facts_min < first):  # a comparison per refresh
            for base in [b for b in facts if first is None or b < first]:
                del facts[base]
            self._facts_min = min(facts, default=1 << 63)
        summaries = self.summaries
        if summaries and (first is None or min(summaries) < first):
            for base in [b for b in summaries if first is None or b < first]:
                del summaries[base]
                self._inos.pop(base, None)

    # ------------------------------------------------------------------ offsets
    def end(self) -> int:
        active = self.active
        return active.end_offset if active is not None else self.tail_end

    def start(self) -> int:
        state_start = self.state.start_offset()
        bases = self.bases
        return max(state_start, bases[0]) if bases else max(state_start, self.end())

    def compute_tail_end(self) -> int:
        if not self.bases:
            return self.state.start_offset()
        base = self.bases[-1]
        return self.live_summary(base).end_offset(base)

    def out_of_range(self, offset: int) -> OffsetOutOfRangeError:
        return OffsetOutOfRangeError(offset, self.start(), self.end())

    def locate(self, offset: int) -> int:
        """The base offset of the segment holding `offset`; OffsetOutOfRangeError if none does."""
        start = self.state.start_offset()
        bases = self.bases
        if offset < start or not bases or offset < bases[0]:
            self.refresh()
            raise self.out_of_range(offset)
        i = bisect.bisect_right(bases, offset) - 1
        if i == len(bases) - 1 and self.readonly:
            self.refresh()
            bases = self.bases
            i = bisect.bisect_right(bases, offset) - 1
        return bases[i]

    # ------------------------------------------------------------------ holding and viewing
    @contextlib.contextmanager
    def hold(self, base: int) -> Iterator:
        """Hold segment `base` (a shared flock) and yield its mapping (None when zero-length)."""
        with self.hold_file(base) as (mm, _):
            yield mm

    @contextlib.contextmanager
    def hold_file(self, base: int) -> Iterator:
        """`hold`, yielding (mapping, inode number): a compaction may replace the file under the
        same name, so what is cached about it is checked against the inode held."""
        try:
            mm, ino = self.acquire(base)
        except FileNotFoundError:
            self.refresh()
            raise self.out_of_range(base) from None
        try:
            yield mm, ino
        finally:
            self.release(base)

    def acquire(self, base: int) -> tuple:
        """Hold segment `base`: (mapping, inode number); FileNotFoundError when it is gone
        (removed, or merged by a compaction into the segment before it). Release it."""
        path = self.segment_path(base)
        fd, mm = self.holds.acquire(path)
        try:
            if base < self.state.start_offset():
                # Logically removed already (the remover advanced the start offset first).
                raise self.out_of_range(base)
            return mm, os.fstat(fd).st_ino
        except BaseException:
            self.holds.release(path)
            raise

    def release(self, base: int) -> None:
        self.holds.release(self.segment_path(base))

    def view_limits(self, base: int, mm, ino: int | None = None) -> tuple[int, int, object]:
        """(readable byte limit, view kind, floor function) of a segment held as `mm`.

        ACTIVE: this process writes it, the limit is exact (a bad record below it is
        corruption). LIVE: the last segment, written by another process: its limit is unknown,
        so a bad record may be one in flight. SEALED: the limit is the sealed length."""
        active = self.active
        if active is not None and active.base_offset == base:
            return active.position, ACTIVE, active.index.floor
        # A reader may meet a segment still zero-length (being created, or left by a crash).
        size = len(mm) if mm is not None else 0
        if base == (self.bases[-1] if self.bases else None):
            ipath = index_path(self.segment_path(base))
            summary = read_sealed(ipath)
            if summary is None:
                rels, positions = read_checkpoints(ipath)
                return size, LIVE, _make_floor(rels, positions)
        else:
            summary = self.summary(base, ino, mm)
        return min(summary.used_bytes, size), SEALED, summary.floor

    # ------------------------------------------------------------------ summaries
    def summary(self, base: int, ino: int | None = None, mm=None) -> SegmentSummary:
        """The sealed summary of a non-active segment, rebuilt from the data if its index is
        missing, damaged or stale. ino / mm: the file held (a compaction may have replaced the
        file under this name since the summary was cached, or since this hold began)."""
        cached = self.summaries.get(base)
        if cached is not None and (ino is None or self._inos.get(base) == ino):
            return cached
        summary = self._read_index(base, ino)
        if summary is None:
            summary = self._rebuild_summary(base, ino, mm)
        with self.meta_lock:
            if not self.bases or base >= self.bases[0]:  # not removed meanwhile
                self.summaries[base] = summary
                self._inos[base] = ino if ino is not None else _ino(self.segment_path(base))
        return summary

    def sealed(self, base: int, summary: SegmentSummary) -> None:
        """The writer sealed segment `base`: keep its summary for readers."""
        self.summaries[base] = summary
        self._inos[base] = _ino(self.segment_path(base))

    def _rebuild_summary(self, base: int, ino: int | None = None, mm=None) -> SegmentSummary:
        path = self.segment_path(base)
        if mm is None:
            with self.hold_file(base) as (held, ino):
                return self._rebuild_summary(base, ino, b"" if held is None else held)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            st = None  # unlinked since we took hold (a compaction's swap): the mapping still reads
        summary = rebuilt_summary(mm, len(mm), st.st_mtime_ns if st is not None else 0, path)
        if 0 < len(mm) < self.segment_size:  # a compaction's output, its index stale or lost
            summary = dataclasses.replace(summary, compacted=True, data_ino=ino & 0xFFFFFFFF)
        log.warning("rebuilt the index of %s (%d records)", path, summary.record_count)
        if not self.readonly and st is not None and st.st_ino == ino:
            try:
                write_sealed(index_path(path), summary)
                os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
            except OSError as exc:  # a full disk, say: the summary in memory is still right
                log.warning("could not write the rebuilt index of %s: %s", path, exc)
        return summary

    def live_summary(self, base: int) -> SegmentSummary:
        """Summary of the last segment written by another process: sealed index, or a scan."""
        path = self.segment_path(base)
        kept = self._live_end
        if kept is not None and kept.base != base:
            kept = None
        if kept is not None and liveend.unchanged(kept, path):
            return kept.summary
        ipath = index_path(path)
        summary = read_sealed(ipath)
        if summary is not None:
            return summary
        ident = liveend.file_id(path)
        with self.hold(base) as mm:
            if kept is not None and kept.file_id == ident:
                rels, positions = [kept.rel], [kept.position]  # resume: appended since
            else:
                rels, positions = read_checkpoints(ipath)
            summary = live_summary(mm, len(mm) if mm is not None else 0, rels, positions)
            self._live_end = liveend.remember(base, ident, summary, mm, rels, positions)
        return summary

    def light_summary(self, base: int, st: os.stat_result) -> SegmentSummary:
        """The summary of sealed segment `base` (the file `st` describes) without its index
        entries, read once per file and kept (see `_facts`)."""
        known = self._facts.get(base)
        if known is not None and known[:2] == (st.st_ino, st.st_size):
            return known[2]
        full = self.summaries.get(base)
        if full is None or self._inos.get(base) != st.st_ino:
            full = self._read_index(base, st.st_ino)
            if full is None:
                full = self._rebuild_summary(base)
        light = dataclasses.replace(full, rels=(), positions=())
        self._facts[base] = (st.st_ino, st.st_size, light)
        self._facts_min = min(self._facts_min, base)
        return light

    def known_marks_seq(self, base: int) -> int | None:
        """The marks sequence number a cached summary of `base` records (None: nothing cached).
        A compaction only raises it, so a stale cache errs towards re-examining the segment."""
        facts = self._facts.get(base)
        if facts is not None:
            return facts[2].marks_seq
        summary = self.summaries.get(base)
        return None if summary is None else summary.marks_seq

    def keep_light_summaries(self, bases: list[int]) -> None:
        """Forget the light summaries of every segment but `bases` (those a full walk found)."""
        self._facts = {b: self._facts[b] for b in bases if b in self._facts}
        self._facts_min = min(self._facts, default=1 << 63)

    def close(self) -> None:
        self.holds.close_all()
        self.marks.close()


def _ino(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None


def _make_floor(rels: list[int], positions: list[int]):
    def floor(rel: int) -> tuple[int, int]:
        i = bisect.bisect_right(rels, rel) - 1
        return (rels[i], positions[i]) if i >= 0 else (0, 0)
    return floor
