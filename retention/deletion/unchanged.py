"""Change-driven passes: a log none of whose inputs can have changed since its last plan is not
planned again; its last result is carried, as if planned (docs: operations.md, "Change-driven passes",
says each input and why).

Its key, taken before the log is read (`log_keys`): the directory and the files written in place;
the last segment's end mark (`commitlog.end_mark`: mmap writes do not reliably
touch mtime); its policy's active triggers on its disk and the disk's read-only flag. Beside it, the
next clock-derived deadline (`reserve`, `consumer_ttl`, `roll_after`, the archive proof's window).

Not kept: a file's mtime within `RACY_NS` of reading it (git's racily clean rule), hung segments,
damage, a disk trigger, a deletion, roll or error, a due `roll_after`, a plan made while a clock step
was held. Planned whatever the key: an open manual trigger, a held clock step, a wall clock before
the last plan. `coupled` plans logs decided together (a budget) together. With dirty marks
(`.changes`, inotify), a claimed log marked clean is not keyed again: its remembered key is
compared, and its end mark is read only if an append may change its plan (`appends_decide`) or
`END_CHECK` passed since it was last read (an append through the mapping raises no event), in
passes spread by the path (`changes.stagger`); a pass over the same logs as the last looks only at
the logs `due` names. One `PlanMemory` per cleaner, under its pass lock: not thread-safe.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from commitlog import end_mark
from policies import DiskSnapshot, ManualTrigger, PolicyConfig
from policies.triggers import DISK_CLEAN, DISK_FORCE, active_triggers

from .changes import ChangeMarks, Reader, stagger
from .due import Basis, DueLogs
from .log_keys import RACY_NS, LogKeys
from .results import LogPassResult
from .watched import WatchedLog

__all__ = ["END_CHECK", "RACY_NS", "PlanMemory", "appends_decide", "carried_result", "coupled", "tail_mark",
           "tail_unchanged"]

END_CHECK = 60.0              # seconds: a clean log's last segment's end is read at least this often
_DISK_TRIGGERS = frozenset((DISK_CLEAN, DISK_FORCE))


def coupled(names: set[str], partners: Callable[[list[str]], list[str]]) -> set[str]:
    """The logs to plan when `names` are: with them, every log of a shared byte budget one of
    them is in (a budget is decided over all of its logs at once)."""
    return set(partners(sorted(names)))


@dataclass(frozen=True)
class _Remembered:
    settings: tuple            # (the log's settings, the policy in force): a reload keeps it when equal
    dev: int
    files: tuple
    tail: tuple
    triggers: tuple
    appends_decide: bool       # an append to its last segment may change its plan (`appends_decide`)
    planned_at: float          # wall clock of the plan (a clock stepped back plans again)
    deadline: float            # the next clock-derived moment its plan may change at
    result: LogPassResult


DiskOf = Callable[[int, str], DiskSnapshot]     # (device, a path on it) -> its disk, read once a pass


class PlanMemory:
    """What each log's last plan was made from, and whether a pass may reuse it (module docstring)."""

    def __init__(self) -> None:
        self._kept: dict[str, _Remembered] = {}
        self._taken: dict[str, tuple[int, tuple | None]] = {}   # keys taken before this pass's reads
        self._triggers: dict[tuple, tuple] = {}     # (policy, dev) -> (triggers, read-only) this pass
        self._keys = LogKeys()
        self.planned = 0                             # logs planned and carried, counted (tests, benches)
        self.carried = 0
        self.keyed = 0                               # keys taken by stats, counted (tests, benches)
        self.tails = 0                               # last segments' ends read, counted (tests, benches)
        self._ends: dict[str, float] = {}            # monotonic time each log's end was last read (or planned)
        self._results: dict[str, LogPassResult] = {}  # each kept plan's carried result (as `_kept`, one look less)
        self._group_args: dict[tuple, tuple] = {}     # (policy id, dev) -> (policy, dev, a path on it)
        self._due = DueLogs()                         # which logs a pass looks at one by one
        self.looked = 0                               # logs looked at one by one, counted (tests, benches)
        # The logs the last split planned and no `remember` saw since; None while a split runs. Not
        # empty at the next split: that pass raised before its plans were remembered (a plan, an
        # end read or a group's triggers `due` relies on may be missing), and every log is looked at.
        self._pending: set[str] | None = set()
        self.changes: ChangeMarks | None = None     # inotify's dirty marks (set by the scheduler), if any

    def split(self, logs: Iterable[WatchedLog], in_force: Mapping[str, PolicyConfig], disk_of: DiskOf,
              manual: Mapping[str, ManualTrigger], at: datetime, *,
              trusted: bool, partners: Callable[[list[str]], list[str]] = list,
              ) -> tuple[list[str], list[LogPassResult]]:
        """(the names to plan at `at`, the carried results of the others); `trusted`: the clock
        guard holds a forward step (everything is planned); `partners`: the names with the logs
        decided together with them (`RetentionConfig.budget_partners`)."""
        self._taken.clear()
        unsettled, self._pending = self._pending != set(), None
        last_triggers, self._triggers = self._triggers, {}
        now, now_ns, mono = at.timestamp(), time.time_ns(), time.monotonic()
        manual = frozenset(policy for policy, trigger in manual.items() if trigger.active)   # the open ones
        # Every clean mark read at once; a log not clean in it is asked `fresh`, which marks it
        # clean before its key is taken, so an event while the key is read counts.
        marked, clean = self.changes.clean(Reader.DELETION) if self.changes is not None else (0.0, {})
        stale = marked - Reader.DELETION.full_check
        logs = logs if isinstance(logs, list) else list(logs)
        looked = self._due_names(logs, in_force, disk_of, bool(manual) or trusted or unsettled, last_triggers, at,
                                 clean, stale, mono)
        plan: list[str] = []
        carried: list[LogPassResult] = []
        if looked is None:
            for w in logs:
                self._look(w, clean, stale, in_force, disk_of, manual, at, now_ns, mono, trusted, plan, carried)
            self._due.basis = _basis(logs, in_force, self.changes, now)
        else:         # the others stand as they were (`due`): carried as the look would carry them
            basis, results = self._due.basis, self._results
            for name in basis.order:
                if name in looked:
                    self._look(basis.watched[name], clean, stale, in_force, disk_of, manual, at, now_ns, mono,
                               trusted, plan, carried)
            carried += [results[name] for name in basis.order if name not in looked]
            self._due.basis = replace(basis, now=now)
        self.looked += len(logs) if looked is None else len(looked)
        self._due.tidy(self._kept, self._ends, END_CHECK, anew=unsettled)
        again = coupled(set(plan), partners) - set(plan)
        if again:          # a carried log's key is the one it remembers
            self._taken.update((r.name, (self._kept[r.name].dev, self._kept[r.name].files))
                               for r in carried if r.name in again)
            plan += [r.name for r in carried if r.name in again]
            carried = [r for r in carried if r.name not in again]
        self.planned += len(plan)
        self.carried += len(carried)
        self._pending = set(plan)
        return plan, carried

    def kept_names(self) -> frozenset[str]:
        """The logs whose last plan is kept (no hung segment, no deletion, no error in it); a copy,
        safe to take beside a pass."""
        return frozenset(self._kept)

    def _look(self, w: WatchedLog, clean: Mapping[str, float], stale: float, in_force: Mapping[str, PolicyConfig],
              disk_of: DiskOf, manual: frozenset[str], at: datetime, now_ns: int, mono: float, trusted: bool,
              plan: list[str], carried: list[LogPassResult]) -> None:
        """Look at `w`: its name onto `plan`, or its kept result onto `carried` (`split`)."""
        kept, marks, ends, now = self._kept.get(w.name), self.changes, self._ends, at.timestamp()
        since = clean.get(w.path)
        fresh = (since is not None and since > stale) or (marks is not None and marks.fresh(w.path))
        if fresh and kept is not None and w.claimed:
            read_end = kept.appends_decide or mono - ends.get(w.name, -END_CHECK) >= END_CHECK
            if not trusted and self._stands(w, kept, in_force, disk_of, manual, at, now, read_end):
                if read_end:
                    self._end_read(w.name, _on_phase(ends.get(w.name), mono))
                carried.append(kept.result)
            else:
                plan.append(w.name)
                self._taken[w.name] = (kept.dev, kept.files)
            return
        claimed, taken = self._take_key(w, now_ns)
        if (not claimed or kept is None or trusted or taken is None or taken != (kept.dev, kept.files)
                or not self._stands(w, kept, in_force, disk_of, manual, at, now, True)):
            plan.append(w.name)
            if taken is not None:
                self._taken[w.name] = taken
        else:          # its end read too: the next read falls where it fell (the spread kept)
            self._end_read(w.name, _on_phase(ends.get(w.name), mono))
            carried.append(kept.result)

    def _due_names(self, logs: list[WatchedLog], in_force: Mapping[str, PolicyConfig], disk_of: DiskOf,
                   everything: bool, last_triggers: dict, at: datetime, clean: Mapping[str, float], stale: float,
                   mono: float) -> set[str] | None:
        """The names of `logs` to look at one by one (`DueLogs.due`); None: every one, as after a
        pass over other logs or when a trigger, the clock or `everything` (a manual trigger, a held
        clock step, a last pass that raised before its plans were remembered) may have moved every
        log's plan, or a group's triggers cannot be read where they last were (`_on_disk`)."""
        basis = self._due.basis
        if (everything or basis is None or self.changes is None or basis.marks is not self.changes
                or basis.in_force is not in_force or basis.end_check != END_CHECK or at.timestamp() < basis.now
                or logs != basis.logs):
            return None
        for group, triggers in last_triggers.items():
            policy, dev, path = self._group_args[group]
            if not _on_disk(path, dev) or self._now_triggers(policy, dev, path, disk_of, at) != triggers:
                return None
        return self._due.due(self._kept, self._ends, clean, stale, at.timestamp(), mono, END_CHECK)

    def _end_read(self, name: str, at: float) -> None:
        """`name`'s end counted as read at monotonic `at`: due again END_CHECK after."""
        self._ends[name] = at
        self._due.end_read(name, at + END_CHECK)

    def _stands(self, w: WatchedLog, kept: _Remembered, in_force: Mapping[str, PolicyConfig], disk_of: DiskOf,
                manual: frozenset[str], at: datetime, now: float, read_end: bool) -> bool:
        """Whether `kept`, the plan of `w` whose key is unchanged, stands at `at`: before its deadline,
        no manual trigger open for its policy (`manual`: the policies with one), the same triggers
        on its disk, and (`read_end`) no record appended."""
        return (kept.planned_at <= now < kept.deadline
                and w.config.policy not in manual
                and self._now_triggers(in_force[w.name], kept.dev, w.path, disk_of, at) == kept.triggers
                and (not read_end or self._tail_unchanged(kept.tail)))

    def _tail_unchanged(self, tail: tuple) -> bool:
        self.tails += 1
        return tail_unchanged(tail)

    def _take_key(self, w: WatchedLog, now_ns: int) -> tuple[bool, tuple[int, tuple | None] | None]:
        """(whether `w` is claimed, its key: `files_key`), read now."""
        self.keyed += 1
        claimed = _claimed(w)          # before the key: a first claim creates the lock file
        taken = self._keys.take(w.name, w.path, now_ns)
        if self.changes is not None and taken is not None and taken[1] is not None:
            self.changes.seen(w.path, taken[0], taken[1][0])     # the directory its watch is on?
        return claimed, taken

    def _now_triggers(self, policy: PolicyConfig, dev: int, path: str, disk_of: DiskOf, at: datetime) -> tuple:
        """The triggers of `policy` on disk `dev` at `at`, and whether it is mounted read-only
        (once per policy and disk a pass)."""
        found = self._triggers.get((id(policy), dev))
        if found is None:
            disk = disk_of(dev, path)
            found = (active_triggers(policy, disk.used_ratio, at, forcing=disk.forcing), _read_only(path))
            self._triggers[(id(policy), dev)] = found
            self._group_args[(id(policy), dev)] = (policy, dev, path)
        return found

    def remember(self, w: WatchedLog, r: LogPassResult, policy: PolicyConfig, disk_of: DiskOf,
                 at: datetime, *, held: bool = False) -> None:
        """After a pass planned `w` at `at`: keep its result when nothing in it depends on more than its
        key. `held`: the pass judged at the clock guard's trusted now (a forward step held), so its
        plan is not the one the wall clock gives once the step is accepted: never kept."""
        self._kept.pop(w.name, None)
        self._results.pop(w.name, None)
        if self._pending is not None:
            self._pending.discard(w.name)
        taken = self._taken.pop(w.name, None)
        snap = r.snapshot
        if (held or taken is None or taken[1] is None or snap is None or r.plan is None or r.error or r.actions
                or r.rolled or r.removed_by_another or r.paced_seconds or r.unpaced or snap.hung or r.damage):
            return
        triggers = self._now_triggers(policy, taken[0], w.path, disk_of, at)
        if _DISK_TRIGGERS & {*triggers[0], *r.plan.triggers}:
            return       # logs on one disk are walked together under pressure
        now = at.timestamp()
        tail, deadline = _tail(w), _deadline(w, r, policy, now)
        if tail is not None and deadline is not None:
            kept = carried_result(r)      # its snapshot read for the deadline, needed no more: ~0.8 KB a log less
            remembered = _Remembered((w.config, policy), taken[0], taken[1], tail, triggers,
                                     appends_decide(w, policy), now, deadline, kept)
            self._keep(w.name, remembered)
            # Its tail as the plan read it, dated up to END_CHECK early by the path: logs planned
            # in one pass (all of them, at start) have their ends read again in different passes.
            self._end_read(w.name, time.monotonic() - stagger(w.path, END_CHECK, share=1.0))

    def adopt(self, old: PlanMemory, logs: Mapping[str, object], in_force: Mapping[str, PolicyConfig]) -> None:
        """Keep what `old` (the memory a reload replaces) remembers of the logs whose settings and
        policy in force are the same in the new configuration (`logs`, `in_force`), with when
        each one's end was last read: the spread of the end checks stands (without it, every
        adopted log's next end read falls in one pass, and so on every END_CHECK after). The
        ends are copied before the plans: a plan made between is newer than its end's date, never older."""
        ends = old._ends.copy()                           # one C call each: safe beside a pass of the old
        for name, kept in old._kept.copy().items():
            if name in logs and kept.settings == (logs[name], in_force[name]):
                self._keep(name, kept)
                if name in ends:
                    self._end_read(name, ends[name])

    def _keep(self, name: str, kept: _Remembered) -> None:
        self._kept[name] = kept
        self._results[name] = kept.result
        self._due.kept(name, kept.deadline, kept.appends_decide)


def _on_phase(last: float | None, mono: float) -> float:
    """The date of an end read at monotonic `mono`: the latest moment of `last`'s END_CHECK grid
    not after `mono` (`mono` itself with no `last`). The next read falls due within END_CHECK of
    this one, in the log's place of the spread however late the pass came: dated `mono`, the
    ends read by a pass after a stall would all fall due again in one pass, every END_CHECK."""
    if last is None or last > mono or END_CHECK <= 0:
        return mono
    return last + (mono - last) // END_CHECK * END_CHECK


def _claimed(w: WatchedLog) -> bool:
    """`w` owned by this process (claimed now if not yet, or anew after a reload); False when it
    cannot be: it is planned, and its read says why. A discovered log's path that is a link now
    is never followed to lock what it points at, and a directory holding no log yet (one of many
    planted under a root) costs no lock file and no descriptor."""
    if (w.real_dir and os.path.islink(w.path)) or not w.exists():
        return False
    try:
        w.claim()
    except Exception:  # noqa: BLE001 (owned elsewhere, no descriptors: planned, and the pass says so)
        return False
    return True


def _on_disk(path: str, dev: int) -> bool:
    """Whether `path`, the log a group's triggers were last read at, is still on disk `dev`: a log
    directory gone or moved to another disk since reads no triggers of the group's (its disk's
    usage cannot be read there, or is another disk's); the look at every log reads them at a log
    that is there."""
    try:
        return os.stat(path).st_dev == dev
    except OSError:
        return False


def _read_only(path: str) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _tail(w: WatchedLog) -> tuple | None:
    """The last segment's end mark as the plan saw it; None when no record may be known to end there."""
    return None if w.last_seen is None else tail_mark(w.last_seen.path, w.last_seen.used_bytes)


def tail_mark(path: str, used_bytes: int) -> tuple | None:
    """The end mark of segment `path` read up to `used_bytes` (`commitlog.end_mark`), to compare
    with `tail_unchanged`; None when a record follows there already, or it is gone."""
    mark = end_mark(path, used_bytes)
    return None if mark is None else (path, used_bytes, mark)


def tail_unchanged(tail: tuple) -> bool:
    path, used, mark = tail
    return end_mark(path, used) == mark


def appends_decide(w: WatchedLog, policy: PolicyConfig) -> bool:
    """Whether records appended to `w`'s last segment as its last snapshot saw it may change its
    plan: only the first record of an empty one being written under `roll_after` (it starts the roll's
    clock). Sizes, caps and budgets count segment files, preallocated at their full size; an append
    fills a mapped file in place. What it changes otherwise is what a carried result shows."""
    info = w.last_seen
    return info is None or not info.size or (policy.roll_after is not None and info.active and not info.record_count)


def _deadline(w: WatchedLog, r: LogPassResult, policy: PolicyConfig, now: float) -> float | None:
    """The earliest future moment `r`'s plan may change by the clock alone; None: it may now."""
    moments = [seg.mtime + policy.reserve for seg in r.snapshot.segments]
    moments += [g.last_commit_at + policy.consumer_ttl for g in r.snapshot.groups if g.last_commit_at]
    info = w.last_seen
    if policy.roll_after is not None and info is not None and info.active and info.record_count:
        due = info.first_timestamp_ms / 1000 + policy.roll_after
        if due <= now:
            return None
        moments.append(due)
    if w.archive is not None:
        if w.archive_until is None and w.archive_doubt is None:
            return None
        if w.archive_until is not None:
            moments.append(w.archive_until)
    future = [m for m in moments if m > now]
    return min(future, default=float("inf"))


def carried_result(r: LogPassResult, pinned: list | None = None) -> LogPassResult:
    """`r` (a planned log's result that deleted, rolled and paced nothing) as a pass that carries
    it gives it: a shallow copy whose plan stands, without its snapshot, pinning `pinned` (none).
    Made once when remembered, the same object every pass carrying it (nothing sets its fields
    after: a pass that finds its files pinned gives a copy of its own, `Cleaner._attach_pins`)."""
    copied = object.__new__(LogPassResult)
    copied.__dict__.update(r.__dict__)
    copied.snapshot, copied.pinned, copied.unchanged = None, pinned if pinned is not None else [], True
    return copied


def _basis(logs: list[WatchedLog], in_force: Mapping[str, PolicyConfig], marks: ChangeMarks | None,
           now: float) -> Basis:
    """What a pass that looked at every one of `logs` looked over (`due.Basis`)."""
    path_of = {w.name: w.path for w in logs}
    return Basis(list(logs), tuple(path_of), {w.name: w for w in logs}, frozenset(path_of),
                 {path: name for name, path in path_of.items()}, frozenset(path_of.values()),
                 frozenset(w.name for w in logs if not w.claimed), in_force, marks, END_CHECK, now)
