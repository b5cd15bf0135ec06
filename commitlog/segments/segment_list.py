"""The ordered segment list of an open log: base offsets oldest first, what each sealed segment's
index says about it (cached), the segment this process writes, and the holds readers take.

A segment's end offset comes from its summary (`SegmentSummary.end_offset`), never from the next
base: compaction leaves gaps, and a compacted segment is smaller than segment_size (see
commitlog.cleanup.swap for the swap and how a compacted file is told apart from a torn one). A reader
holding a replaced file keeps its descriptor and mapping until it lets go.

State kept per segment (the summaries, commitlog.segments.summaries) goes when its segment goes:
`forget_below` drops the bases and summaries of segments another process removed from the head (a
long-running writer whose head a sidecar removes would otherwise keep both forever). The list's
fields change only through its methods (`load`, `refresh`, `activate`, `retire_active`, ...).

Thread-safe: the list changes under `meta_lock`, and `bases` is replaced whole, never changed in
place, so a reader's snapshot of it stays valid.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import threading
from collections.abc import Iterator

from . import summary_reads
from .active import ActiveSegment
from ..errors import CorruptLogError, OffsetOutOfRangeError
from .index import SegmentSummary, read_checkpoints, read_sealed
from ..layout import SegmentListing, index_path, list_segments, marks_path, segment_path
from ..locks import SegmentHolds
from ..marks import MarkSet
from ..safeopen import check_not_link
from .summaries import SegmentSummaries
from ..state import LogState


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
        self.summaries = SegmentSummaries(directory, segment_size, readonly)
        self._bases: list[int] = []
        # The segment this process appends to (None for a reader, or between segments): a plain
        # attribute, read on every append, written only by `activate` and `retire_active`.
        self.active: ActiveSegment | None = None
        self._tail_end = 0  # the end offset while there is no active segment
        # Bases of an interrupted swap's leftovers found at a read-only open (commitlog.cleanup.swap):
        # superseded by the compacted segment before them, never located by a read.
        self._leftovers: frozenset[int] = frozenset()
        # Gaps between segment files found recorded as a compaction's (commitlog.segments.gapcheck):
        # not read again (a record is only ever pruned below the start offset).
        self.passed_gaps: set[tuple[int, int]] = set()

    @property
    def bases(self) -> list[int]:
        """The segments' base offsets, oldest first (replaced whole on change: a snapshot)."""
        return self._bases

    @property
    def leftovers(self) -> frozenset[int]:
        return self._leftovers

    # ------------------------------------------------------------------ listing
    def segment_path(self, base: int) -> str:
        return segment_path(self.path, base)

    def list(self, *, validate: bool = False) -> SegmentListing:
        """One scan of the directory; with `validate`, every segment's size is checked too (a
        compacted segment is smaller, and must be a complete one: see `compacted_summary`)."""
        listing = list_segments(self.path, stat_head=None if validate else 0)
        for path in listing.foreign:   # a link at a segment's name is refused, never read
            check_not_link(path)
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

    def load(self, *, validate: bool = False) -> None:
        """Take the directory's segments as the list (at open, and after finishing swaps)."""
        bases = list(self.list(validate=validate).bases)
        with self.meta_lock:
            self._bases = bases

    def pass_over(self, leftovers: set[int]) -> None:
        """A read-only open found an interrupted swap's `leftovers`: never located by a read."""
        with self.meta_lock:
            self._leftovers = frozenset(leftovers)
            self._bases = [b for b in self._bases if b not in leftovers]

    def short_summary(self, base: int, size: int) -> SegmentSummary | None:
        """The summary of segment `base` (`size` bytes as listed) when it is shorter than
        segment_size and complete: a compaction's output, or a segment a time-based roll sealed
        short. None for a full-size, empty, torn or foreign file; only short files are read."""
        return self.compacted_summary(base, size) if 0 < size < self.segment_size else None

    def compacted_summary(self, base: int, size: int) -> SegmentSummary | None:
        """The summary of segment `base` if it is a complete compaction output, else None
        (commitlog.segments.summary_reads.compacted_summary)."""
        return summary_reads.compacted_summary(self, base, size)

    def refresh(self) -> None:
        """Re-read the list from the directory (other processes add and remove segments)."""
        bases = list(self.list().bases)
        if self._leftovers:
            self._leftovers = self._leftovers.intersection(bases)  # gone once a writer removed them
            bases = [b for b in bases if b not in self._leftovers]
        with self.meta_lock:
            active = self.active
            if active is not None and active.base_offset not in bases:
                bases.append(active.base_offset)
                bases.sort()
            self._bases = bases
            self.summaries.forget_below(bases[0] if bases else None)

    def forget(self, base: int) -> None:
        """Segment `base` is gone: drop what is kept about it."""
        with self.meta_lock:
            if base in self._bases:
                self._bases = [b for b in self._bases if b != base]
            self.summaries.forget(base)

    def replaced(self, base: int) -> None:
        """Segment `base` was rewritten under the same name: drop what was kept about it."""
        with self.meta_lock:
            self.summaries.replaced(base)

    def forget_below(self, start_offset: int) -> None:
        """Drop the segments logically removed (their successor starts at or below
        `start_offset`), wherever the removal ran. Called by the writer at each roll."""
        with self.meta_lock:
            bases = self._bases
            i = 0
            while i + 1 < len(bases) and bases[i + 1] <= start_offset:
                i += 1
            if i:
                self._bases = bases = bases[i:]
            self.summaries.forget_below(bases[0] if bases else None)

    # ------------------------------------------------------------------ the active segment
    def activate(self, segment: ActiveSegment | None) -> None:
        """`segment` is the one this process appends to now (None: the last is sealed, or
        there is none, and the end is read from the last segment)."""
        with self.meta_lock:
            self.active = segment
            if segment is not None and (not self._bases or self._bases[-1] < segment.base_offset):
                self._bases = self._bases + [segment.base_offset]
        if segment is None:
            self._tail_end = self.compute_tail_end()

    def retire_active(self) -> ActiveSegment | None:
        """Stop appending to the active segment (sealed by a roll, or closed): returned, its end
        now the log's end until the next is activated."""
        with self.meta_lock:
            old = self.active
            if old is not None:
                self.active = None
                self._tail_end = old.end_offset
        return old

    # ------------------------------------------------------------------ offsets
    def end(self) -> int:
        active = self.active
        return active.end_offset if active is not None else self._tail_end

    def start(self) -> int:
        state_start = self.state.start_offset()
        bases = self._bases
        return max(state_start, bases[0]) if bases else max(state_start, self.end())

    def catch_up(self) -> None:
        """A reader's view of another process's writes: the list and the end read again."""
        self.refresh()
        if self.active is None:
            self._tail_end = self.compute_tail_end()

    def compute_tail_end(self) -> int:
        bases = self._bases
        if not bases:
            return self.state.start_offset()
        base = bases[-1]
        return self.live_summary(base).end_offset(base)

    def out_of_range(self, offset: int) -> OffsetOutOfRangeError:
        return OffsetOutOfRangeError(offset, self.start(), self.end())

    def locate(self, offset: int) -> int:
        """The base offset of the segment holding `offset`; OffsetOutOfRangeError if none does."""
        start = self.state.start_offset()
        bases = self._bases
        if offset < start or not bases or offset < bases[0]:
            self.refresh()
            raise self.out_of_range(offset)
        i = bisect.bisect_right(bases, offset) - 1
        if i == len(bases) - 1 and self.readonly:
            self.refresh()
            bases = self._bases
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
        same name, so what is kept about it is checked against the inode held."""
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
        bases = self._bases
        if base == (bases[-1] if bases else None):
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
        file under this name since the summary was kept, or since this hold began)."""
        summaries = self.summaries
        summary = summaries.cached(base, ino)
        if summary is not None:
            return summary
        summary = summaries.read_index(base, ino)
        if summary is None:
            summary = self._rebuild(base, ino, mm)
        with self.meta_lock:
            if not self._bases or base >= self._bases[0]:  # not removed meanwhile
                summaries.keep(base, ino, summary)
        return summary

    def sealed(self, base: int, summary: SegmentSummary) -> None:
        """The writer sealed segment `base`: keep its summary for readers."""
        self.summaries.keep(base, None, summary)

    def _rebuild(self, base: int, ino: int | None, mm) -> SegmentSummary:
        if mm is None:
            with self.hold_file(base) as (held, ino):
                return self.summaries.rebuild(base, ino, b"" if held is None else held)
        return self.summaries.rebuild(base, ino, mm)

    def live_summary(self, base: int) -> SegmentSummary:
        """Summary of the last segment written by another process: sealed index, or a scan
        (commitlog.segments.summary_reads.last_segment_summary)."""
        return summary_reads.last_segment_summary(self, base)

    def light_summary(self, base: int, st: os.stat_result) -> SegmentSummary:
        """The summary of sealed segment `base` (the file `st` describes) without its index
        entries, read once per file and kept (see commitlog.segments.summaries)."""
        summaries = self.summaries
        light = summaries.light(base, st)
        if light is not None:
            return light
        full = summaries.cached(base, st.st_ino) or summaries.read_index(base, st.st_ino)
        if full is None:
            full = self._rebuild(base, None, None)
        return summaries.keep_light(base, st, full)

    def close(self) -> None:
        self.holds.close_all()
        self.marks.close()


def _make_floor(rels: list[int], positions: list[int]):
    def floor(rel: int) -> tuple[int, int]:
        i = bisect.bisect_right(rels, rel) - 1
        return (rels[i], positions[i]) if i >= 0 else (0, 0)
    return floor
