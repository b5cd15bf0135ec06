"""Which logs a pass must look at one by one, without a look at every log (10,000 logs on a sidecar).

After a pass over a group's logs, a log whose plan is kept stands at the next pass over the same
logs, as `PlanMemory`'s look at it would find, unless one of these says otherwise: it has no kept
plan, or no claim; its directory's clean mark is gone or as old as the full check (an event:
`ChangeMarks`); its plan's deadline has come (a heap by wall time); its end is to be read (`END_CHECK`
after the last read: a heap by monotonic time) or is read at every pass (`appends_decide`). The
look at each log stands in for these only while nothing else of its judgement moved: every log is
looked at after a pass over other logs, a policy or disk whose triggers moved, an open manual
trigger, a held clock step, a wall clock earlier than the last pass's, an `END_CHECK` changed, a
last pass that raised before its plans were remembered, or a group's triggers no longer readable
at the log they were read at (gone, or on another disk).
Operations, "Change-driven passes", says what each costs. Not thread-safe: its `PlanMemory`'s.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Basis", "DueLogs"]

_SLACK = 1e-3     # s: an end read due this close is tested as the look tests it (rounding)


@dataclass(frozen=True)
class Basis:
    """What the last pass looked over: a pass over the same list (`logs`, identical objects) may
    look only at the logs `DueLogs.due` names."""
    logs: list                 # the WatchedLogs, in the pass's order
    order: tuple[str, ...]     # their names, in that order
    watched: Mapping[str, object]  # name -> its WatchedLog
    names: frozenset[str]
    name_of: Mapping[str, str]  # directory -> name
    paths: frozenset[str]
    unclaimed: frozenset[str]   # no claim when the pass began: looked at until a full look finds it
    in_force: object            # the mapping of policies in force the pass judged by (identity)
    marks: object               # the ChangeMarks it read (identity)
    end_check: float            # END_CHECK then
    now: float                  # its wall clock (s)


class DueLogs:
    """The moments kept plans fall due (deadlines, end reads) and the logs read at every pass; the
    `Basis` of the last pass. Entries of a plan replaced since are skipped when they come up, and
    the heaps are built again from the plans once they hold twice as many entries."""

    def __init__(self) -> None:
        self._deadlines: list[tuple[float, str]] = []    # (wall deadline, name)
        self._ends: list[tuple[float, str]] = []         # (monotonic moment its end is to be read, name)
        self.every_pass: set[str] = set()                # kept plans whose end is read at every pass
        self._end_check: float | None = None             # the END_CHECK the ends' moments were worked out with
        self.basis: Basis | None = None

    def kept(self, name: str, deadline: float, appends_decide: bool) -> None:
        """A plan of `name` is kept with `deadline` (inf: none)."""
        if deadline != float("inf"):
            heapq.heappush(self._deadlines, (deadline, name))
        (self.every_pass.add if appends_decide else self.every_pass.discard)(name)

    def end_read(self, name: str, due: float) -> None:
        """`name`'s end is next to be read at monotonic `due`."""
        heapq.heappush(self._ends, (due, name))

    def due(self, kept: Mapping, ends: Mapping[str, float], clean: Mapping[str, float], stale: float,
            now: float, mono: float, end_check: float) -> set[str]:
        """The names of the basis's logs to look at one by one at wall `now`, monotonic `mono`
        (`clean`: the clean marks read for the pass; a mark not after `stale` is keyed again)."""
        basis = self.basis
        looked = set(basis.names - kept.keys())
        looked |= basis.unclaimed & basis.names
        looked |= self.every_pass & basis.names
        fresh = {path for path, since in clean.items() if since > stale}
        looked.update(basis.name_of[path] for path in basis.paths - fresh)
        while self._deadlines and self._deadlines[0][0] <= now:
            deadline, name = heapq.heappop(self._deadlines)
            plan = kept.get(name)
            if plan is not None and plan.deadline == deadline:
                looked.add(name)
        again = []
        while self._ends and self._ends[0][0] <= mono + _SLACK:
            due, name = heapq.heappop(self._ends)
            if name not in kept or ends.get(name, float("-inf")) + end_check != due:
                continue                             # a read since, or no plan: its entry replaced
            if mono - ends[name] >= end_check:       # the look's own test, to the last bit
                looked.add(name)
            else:
                again.append((due, name))
        for entry in again:
            heapq.heappush(self._ends, entry)
        self.tidy(kept, ends, end_check)
        return looked & basis.names

    def tidy(self, kept: Mapping, ends: Mapping[str, float], end_check: float, *, anew: bool = False) -> None:
        """The heaps built again from the plans when replaced entries make up half of them, or
        `anew` (after a pass that raised before its plans were remembered: the entries it took off
        are there again); the ends' also when `end_check` is not the one their moments were worked
        out with (each entry replaced then, none due again at the new `END_CHECK`)."""
        limit = 2 * len(kept) + 64
        if anew or len(self._deadlines) > limit:
            self._deadlines = [(plan.deadline, name) for name, plan in kept.items() if plan.deadline != float("inf")]
            heapq.heapify(self._deadlines)
        if anew or end_check != self._end_check or len(self._ends) > limit:
            self._ends = [(ends[name] + end_check, name) for name in kept if name in ends]
            heapq.heapify(self._ends)
            self._end_check = end_check
