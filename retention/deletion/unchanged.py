"""Change-driven passes: a log none of whose inputs can have changed since its last plan is not
planned again; its last result is carried, as if planned (docs: operations.md, "Change-driven passes").

Its key, taken before the log is read: the directory's inode, mode and owner, and its entries'
(name, inode), listed again only when its mtime or ctime moved (a segment rolled, removed or
swapped; every record replaced by a rename; not SQLite's -wal and -shm, which come and go with
connections); (inode, size, mtime_ns) of the files written in place (`state.db`, a non-empty
`-wal`, `marks`); the last segment's end mark
(`commitlog.end_mark`: mmap writes do not reliably touch mtime); the active triggers of its policy
on its disk now and the disk's read-only flag. Beside it, the next clock-derived deadline: the first
future moment a segment seen turns older than `reserve`, a group goes stale (`consumer_ttl`), the
last segment reaches `roll_after` or the archive tier's proof leaves its window.

Not kept (planned every pass): an in-place file's mtime within `RACY_NS` of reading it (git's
racily clean rule; a listing is kept only past it too), hung segments, damage, a disk trigger (logs on one disk are walked together), a deletion,
roll or error, a `roll_after` already due, a plan made while a forward clock step was held (judged
at the trusted now, not what the wall clock gives once the step is accepted). Planned whatever the key: an open manual trigger, a held
forward clock step, a wall clock before the last plan. `coupled` is the one place where logs
decided together are planned again together. One `PlanMemory` per cleaner, used under its pass
lock: not thread-safe.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from commitlog.layout import SPARK_LEDGER_FILE, STATE_FILE, marks_path, state_path
from commitlog import end_mark
from policies import NO_MANUAL_TRIGGER, DiskSnapshot, ManualTrigger, PolicyConfig
from policies.triggers import DISK_CLEAN, DISK_FORCE, active_triggers

from .results import LogPassResult
from .watched import WatchedLog

__all__ = ["RACY_NS", "PlanMemory", "coupled", "files_key"]

RACY_NS = 2_000_000_000       # an mtime this close to the moment it was read is not trusted
_DISK_TRIGGERS = frozenset((DISK_CLEAN, DISK_FORCE))


def key_paths(path: str) -> tuple[str, ...]:
    """The log directory `path` and its files written in place (`start.offset` moves only with a
    removal, which renames a segment)."""
    state = state_path(path)
    return path, state, state + "-wal", marks_path(path)


# SQLite's companions come and go with its connections (the sidecar's own reads among them), an
# empty -wal is no commit: neither is a change of what the log holds.
_CONNECTION_FILES = frozenset(name + suffix for name in (STATE_FILE, SPARK_LEDGER_FILE)
                              for suffix in ("-wal", "-shm", "-journal"))


class _Listing:
    """A directory's entries (name, inode), less SQLite's companions, listed again only when its
    (mtime_ns, ctime_ns) moved or were racily recent when listed; kept as their hash (an int, not
    25 tuples a log: 10,000 logs)."""

    __slots__ = ("times", "entries")

    def __init__(self) -> None:
        self.times: tuple | None = None
        self.entries: int | None = None

    def read(self, path: str, st: os.stat_result, now_ns: int) -> int:
        times = (st.st_mtime_ns, st.st_ctime_ns)
        if times != self.times or self.entries is None:
            with os.scandir(path) as listing:
                self.entries = hash(frozenset((e.name, e.inode()) for e in listing
                                              if e.name not in _CONNECTION_FILES))
            settled = now_ns - max(times) >= RACY_NS      # a change in the same tick would go unseen
            self.times = times if settled else None
        return self.entries


def files_key(paths: tuple[str, ...], listing: _Listing, now_ns: int) -> tuple[int, tuple | None] | None:
    """(the directory's device, the key of its entries and in-place files: see the module
    docstring) of `key_paths`; None when the directory cannot be read, and no key when an in-place
    file's mtime is within `RACY_NS` of `now_ns`."""
    try:
        st = os.stat(paths[0])
        key: list = [st.st_ino, st.st_mode, st.st_uid, st.st_gid, listing.read(paths[0], st, now_ns)]
    except OSError:
        return None
    for name in paths[1:]:
        try:
            f = os.stat(name)
        except FileNotFoundError:
            key.append(None)
            continue
        except OSError:
            return st.st_dev, None
        if now_ns - f.st_mtime_ns < RACY_NS:
            return st.st_dev, None
        key.append((f.st_ino, f.st_size, f.st_mtime_ns) if f.st_size else None)   # an empty -wal: none
    return st.st_dev, tuple(key)


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
        self._paths: dict[str, tuple] = {}           # log name -> (its key_paths, its _Listing)
        self.planned = 0                             # logs planned and carried, counted (tests, benches)
        self.carried = 0

    def split(self, logs: Iterable[WatchedLog], in_force: Mapping[str, PolicyConfig], disk_of: DiskOf,
              manual: Mapping[str, ManualTrigger], at: datetime, *,
              trusted: bool, partners: Callable[[list[str]], list[str]] = list,
              ) -> tuple[list[str], list[LogPassResult]]:
        """(the names to plan at `at`, the carried results of the others); `trusted`: the clock
        guard holds a forward step (everything is planned); `partners`: the names with the logs
        decided together with them (`RetentionConfig.budget_partners`)."""
        self._taken.clear()
        self._triggers.clear()
        now, now_ns = at.timestamp(), time.time_ns()
        plan, carried, carried_keys = [], [], {}
        for w in logs:
            paths = self._paths.get(w.name)
            if paths is None or paths[0][0] != w.path:
                paths = self._paths[w.name] = (key_paths(w.path), _Listing())
            claimed = _claimed(w)          # before the key: a first claim creates the lock file
            taken = files_key(*paths, now_ns)
            kept = self._kept.get(w.name)
            if (not claimed or kept is None or trusted or taken is None or taken != (kept.dev, kept.files)
                    or not kept.planned_at <= now < kept.deadline
                    or manual.get(w.config.policy, NO_MANUAL_TRIGGER).active
                    or self._now_triggers(in_force[w.name], taken[0], w.path, disk_of, at) != kept.triggers
                    or not _tail_unchanged(kept.tail)):
                plan.append(w.name)
                if taken is not None:
                    self._taken[w.name] = taken
            else:
                carried.append(kept.result)
                carried_keys[w.name] = taken
        again = coupled(set(plan), partners) - set(plan)
        self._taken.update((name, carried_keys[name]) for name in again if name in carried_keys)
        plan += [r.name for r in carried if r.name in again]
        carried = [r for r in carried if r.name not in again]
        self.planned += len(plan)
        self.carried += len(carried)
        return plan, [_carried(r) for r in carried]

    def _now_triggers(self, policy: PolicyConfig, dev: int, path: str, disk_of: DiskOf, at: datetime) -> tuple:
        """The triggers of `policy` on disk `dev` at `at`, and whether it is mounted read-only
        (once per policy and disk a pass)."""
        found = self._triggers.get((id(policy), dev))
        if found is None:
            disk = disk_of(dev, path)
            found = (active_triggers(policy, disk.used_ratio, at, forcing=disk.forcing), _read_only(path))
            self._triggers[(id(policy), dev)] = found
        return found

    def remember(self, w: WatchedLog, r: LogPassResult, policy: PolicyConfig, disk_of: DiskOf,
                 at: datetime, *, held: bool = False) -> None:
        """After a pass planned `w` at `at`: keep its result when nothing in it depends on more than its
        key. `held`: the pass judged at the clock guard's trusted now (a forward step held), so its
        plan is not the one the wall clock gives once the step is accepted: never kept."""
        self._kept.pop(w.name, None)
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
            self._kept[w.name] = _Remembered((w.config, policy), taken[0], taken[1], tail, triggers, now, deadline, r)

    def adopt(self, old: PlanMemory, logs: Mapping[str, object], in_force: Mapping[str, PolicyConfig]) -> None:
        """Keep what `old` (the memory a reload replaces) remembers of the logs whose settings and
        policy in force are the same in the new configuration (`logs`, `in_force`)."""
        for name, kept in old._kept.copy().items():      # one C call: safe beside a pass of the old
            if name in logs and kept.settings == (logs[name], in_force[name]):
                self._kept[name] = kept


def _claimed(w: WatchedLog) -> bool:
    """`w` owned by this process (claimed now if not yet, or anew after a reload); False when it
    cannot be: it is planned, and its read says why."""
    try:
        w.claim()
    except Exception:  # noqa: BLE001 (owned elsewhere, no descriptors: planned, and the pass says so)
        return False
    return True


def _read_only(path: str) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _tail(w: WatchedLog) -> tuple | None:
    """The last segment's end mark as the plan saw it; None when no record may be known to end there."""
    info = w.last_seen
    if info is None:
        return None
    mark = end_mark(info.path, info.used_bytes)
    return None if mark is None else (info.path, info.used_bytes, mark)


def _tail_unchanged(tail: tuple) -> bool:
    path, used, mark = tail
    return end_mark(path, used) == mark


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


def _carried(r: LogPassResult) -> LogPassResult:
    """`r` (a planned log's result that deleted, rolled and paced nothing) as a pass that carried it
    gives it: a copy, so each pass's result has its own pins."""
    carried = copy.copy(r)
    carried.pinned, carried.unchanged = [], True
    return carried
