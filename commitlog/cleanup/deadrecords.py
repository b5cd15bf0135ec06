"""The dead-records part of CommitLog's facade: marking records dead, the dead bytes, and
compaction's entry points (the mechanisms live in commitlog.marks, commitlog.cleanup.rewrite,
commitlog.cleanup.swap and commitlog.cleanup.tombstones). A mixin of CommitLog, which provides `_segs`, `path`,
`end_offset`, `start_offset` and `_check_open`; thread- and process-safety as CommitLog's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from . import rewrite, swap
from .marks_shrink import STEP_ENTRIES, shrink_marks
from ..segments import seginfo
from .rewrite import CompactionOutput, MarksSnapshot
from ..errors import InvalidArgumentError
from ..layout import tombstones_path
from ..marks import to_ranges
from ..segments.segment import SegmentInfo
from .tombstones import TombstoneBook


class DeadRecords:
    """CommitLog's methods for dead records and compaction (see the module docstring)."""

    def dead_bytes(self) -> int:
        """Bytes of the sealed segments' records marked dead and not yet dropped by a compaction
        (what compacting everything would give back, keyed liveness aside)."""
        self._check_open()
        return seginfo.dead_bytes(self._segs)

    def segments_with_dead(self, select: Callable[[SegmentInfo], bool] | None = None) -> list[SegmentInfo]:
        """The sealed segments holding records marked dead and not yet dropped (those of them
        `select` picks, when given: a compaction policy's rule), each with its neighbours, and
        the last segment, oldest first (see commitlog.segments.seginfo.dead_neighbourhoods): a
        compaction plan's input over a log of many segments without a stat of each."""
        self._check_open()
        if select is not None and not callable(select):
            raise InvalidArgumentError(f"select must be a function of a SegmentInfo, got {select!r}")
        return seginfo.dead_neighbourhoods(self._segs, select)

    def mark_dead(self, offsets: Iterable[int]) -> int:
        """Mark the records at `offsets` dead, durably (on disk when this returns), from any
        process, a read-only handle included: readers never return them again, and a compaction
        drops them (see commitlog.marks). Offsets already dead, removed, or in a gap are passed
        over. Returns how many records were newly marked. InvalidArgumentError for an offset not
        written yet or not an int >= 0 (nothing is marked then); StoreFullError when the disk
        has no room for the marks file to grow."""
        self._check_open()
        self._check_media("mark records dead")
        if isinstance(offsets, (str, bytes)) or not isinstance(offsets, Iterable):
            raise InvalidArgumentError(f"offsets must be an iterable of ints, got {offsets!r}")
        if not (isinstance(offsets, range) and offsets.step == 1):
            offsets = list(offsets)
            for o in offsets:
                if not isinstance(o, int) or isinstance(o, bool) or o < 0:
                    raise InvalidArgumentError(f"offsets must be ints >= 0, got {o!r}")
        elif offsets.start < 0:
            raise InvalidArgumentError(f"offsets must be ints >= 0, got {offsets!r}")
        runs = to_ranges(offsets)
        end = self.end_offset
        if runs and runs[-1][1] > end:
            raise InvalidArgumentError(f"offset {runs[-1][1] - 1} of {self.path} is not written "
                                       f"yet (the log ends at {end}): only written records can "
                                       f"be marked dead")
        marks = self._segs.marks
        before = marks.count
        newly = marks.mark(runs, lambda fresh: rewrite.measure(self._segs, fresh))
        if marks.count // STEP_ENTRIES != before // STEP_ENTRIES:   # another step of the file
            with swap.compaction_lock(self.path, wait=False) as free:
                if free:
                    shrink_marks(self._segs)
        return newly

    def marks_snapshot(self) -> MarksSnapshot:
        """The marks at this instant: build a key index (`record_facts`) and compact from it."""
        self._check_open()
        return rewrite.snapshot(self._segs)

    def record_facts(self, marks: MarksSnapshot, start: int | None = None,
                     end: int | None = None) -> Iterator[tuple[int, bytes | None, bool, bool]]:
        """(offset, key, tombstone, marked) of every record in [start, end) under `marks`, dead
        ones included: what a compaction's key index is built from."""
        self._check_open()
        return rewrite.record_facts(self._segs, marks, start, end)

    def compact(self, runs: Sequence[Sequence[int]], decide: rewrite.Decide, *,
                marks: MarksSnapshot | None = None, on_bytes=None,
                should_stop=None) -> list[CompactionOutput]:
        """Rewrite each run of consecutive sealed segments (their base offsets) into one file of
        the records `decide(offset, key, tombstone, marked)` keeps (None: keep; else the cause
        it is dropped for), same offsets, swapped in crash-safely (commitlog.cleanup.swap). Any process
        may compact, a read-only handle included; compactions serialise on a lock file.
        `on_bytes(n)`: bytes read plus written, about a megabyte at a time (sleep there to
        throttle); `should_stop()`: asked between outputs. StoreFullError (nothing changed) when
        the disk lacks room for an output plus one segment_size; InvalidArgumentError for a run
        that is not consecutive sealed segments (never the last, active one). With no run, it
        only finishes what a killed compaction left (superseded inputs, `.cleaned` files)."""
        self._check_open()
        self._check_media("compact")
        return rewrite.compact(self._segs, runs, decide, marks, on_bytes=on_bytes,
                                  should_stop=should_stop)

    def tombstones_first_seen(self) -> dict[int, float]:
        """Offset -> epoch seconds at which a compaction first kept the tombstone there."""
        self._check_open()
        return TombstoneBook(tombstones_path(self.path)).first_seen(self._segs.start())

    def note_tombstones(self, seen: Mapping[int, float]) -> int:
        """Record when tombstones kept by a compaction were first seen (earliest time wins,
        durable on return, any process); returns how many were new."""
        self._check_open()
        self._check_media("record tombstones")
        return TombstoneBook(tombstones_path(self.path)).note(seen)
