"""DeadRecords: a log's dead records and compaction, as `CommitLog` holds them: marking records
dead, the dead bytes, compaction's entry points and the tombstones' first-seen times (the
mechanisms live in commitlog.marks, commitlog.cleanup.rewrite, commitlog.cleanup.swap and
commitlog.cleanup.tombstones). Each method checks the log is open (and, to change it, that it may:
the `LogGate` it is given) and keeps the contract of the `CommitLog` method of its name, which
calls it. Thread- and process-safety as CommitLog's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from . import rewrite, swap
from .marks_shrink import STEP_ENTRIES, shrink_marks
from ..segments import seginfo
from ..segments.segment_list import SegmentList
from .marks_snapshot import MarksSnapshot, snapshot
from .kept_copy import Decide
from .rewrite import RewrittenRun
from ..access import LogGate
from ..errors import InvalidArgumentError
from ..layout import tombstones_path
from ..marks import to_ranges
from ..segments.segment import SegmentInfo
from .tombstones import TombstoneBook


class DeadRecords:
    """The dead records of the log in directory `gate.path` whose segments `segs` lists;
    `end()`: the log's end offset (a read-only open's as far as written)."""

    def __init__(self, segs: SegmentList, gate: LogGate, end: Callable[[], int]) -> None:
        self._segs = segs
        self._gate = gate
        self._end = end
        self.path = gate.path

    def dead_bytes(self) -> int:
        self._gate.check_open()
        return seginfo.dead_bytes(self._segs)

    def segments_with_dead(self, select: Callable[[SegmentInfo], bool] | None) -> list[SegmentInfo]:
        self._gate.check_open()
        if select is not None and not callable(select):
            raise InvalidArgumentError(f"select must be a function of a SegmentInfo, got {select!r}")
        return seginfo.dead_neighbourhoods(self._segs, select)

    def mark_dead(self, offsets: Iterable[int]) -> int:
        self._gate.check_change("mark records dead")
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
        end = self._end()
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
        self._gate.check_open()
        return snapshot(self._segs)

    def record_facts(self, marks: MarksSnapshot, start: int | None,
                     end: int | None) -> Iterator[tuple[int, bytes | None, bool, bool]]:
        self._gate.check_open()
        return rewrite.record_facts(self._segs, marks, start, end)

    def compact(self, runs: Sequence[Sequence[int]], decide: Decide, marks: MarksSnapshot | None,
                on_bytes, should_stop) -> list[RewrittenRun]:
        self._gate.check_change("compact")
        return rewrite.compact(self._segs, runs, decide, marks, on_bytes=on_bytes, should_stop=should_stop)

    def tombstones_first_seen(self) -> dict[int, float]:
        self._gate.check_open()
        return TombstoneBook(tombstones_path(self.path)).first_seen(self._segs.start())

    def note_tombstones(self, seen: Mapping[int, float]) -> int:
        self._gate.check_change("record tombstones")
        return TombstoneBook(tombstones_path(self.path)).note(seen)
