"""The status view: the parts of the `/status` answer (`status_models.Status`) built from the
scheduler's state, and what a pass saw of each log (segments, bytes, hung segments, pinned files,
consumer lag).

Pure builders over what they are given; they read the log's committed offsets and hung registry
(best effort) and nothing else, so they are as thread-safe as their inputs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone

from commitlog import is_log_directory, segment_name
from policies import (BUDGET, DELETED, DISK_CLEAN, DISK_FORCE, LEVEL_NAMES, MANUAL, REFUSE_WRITES, SIZE_CAP,
                      TIME_WINDOW, ManualTrigger, PolicyConfig, RetentionConfig, SegmentDecision)

from ..deletion.pinned import pinned_bytes
from ..deletion.results import LogPassResult
from .status_models import BudgetLogView, BudgetView, FilesystemView, LogDisk, LogStatus, PolicyView

__all__ = ["LAG_NOTE", "budget_views", "describe_log", "empty_state", "filesystem_views", "iso", "log_views", "policy_views",
           "primary_trigger", "shortest_interval", "uptime"]

LAG_NOTE = ("lag_bytes is approximate: the bytes of the segment files at or after the committed "
            "offset (the active segment counts whole, as preallocated)")
_NO_TRIGGER = "none"


def iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="milliseconds")


def primary_trigger(decision: SegmentDecision, triggers: Iterable[str]) -> str:
    """The trigger a deletion is counted under: the one that overrode a reason to keep it, else
    `budget` when a budget took it, else the most pressing active one (disk-force, refuse-writes,
    size-cap, disk-clean, manual, time-window)."""
    if decision.overridden_by:
        return decision.overridden_by
    active = set(triggers)
    if BUDGET in decision.because:
        return BUDGET
    for t in (DISK_FORCE, REFUSE_WRITES, SIZE_CAP, DISK_CLEAN, MANUAL, TIME_WINDOW):
        if t in active:
            return t
    return next(iter(triggers), _NO_TRIGGER)


def policy_views(config: RetentionConfig) -> dict[str, PolicyView]:
    """`/status`'s `policies`: each policy some log uses, with its logs, by name."""
    return {name: PolicyView(**_policy_fields(config.policies[name]),
                             logs=[n for n, log in config.logs.items() if log.policy == name])
            for name in sorted({log.policy for log in config.logs.values()})}


def _policy_fields(p: PolicyConfig) -> dict:
    return {
        "interval_seconds": p.interval, "delete_at_hours": list(p.delete_at_hours),
        "timezone": p.timezone, "reserve_seconds": p.reserve, "retention_bytes": p.retention_bytes,
        "roll_after_seconds": p.roll_after,
        "files_per_pass": p.files_per_pass,
        "pause_between_files_seconds": p.pause_between_files,
        "disk_check_interval_seconds": p.disk_check_interval,
        "clean_ratio": p.disk.clean_ratio, "force_ratio": p.disk.force_ratio,
        "refuse_writes_ratio": p.disk.refuse_writes_ratio, "force": p.disk.force,
        "protect_unconsumed": p.protect_unconsumed,
        "hung_force_after_seconds": p.hung.force_after, "hung_retry_every_seconds": p.hung.retry_every,
    }


def shortest_interval(policies: Mapping[str, PolicyView]) -> float | None:
    """`/status`'s `interval_seconds`: the shortest interval of the policies in use, None without logs."""
    return min((p.interval_seconds for p in policies.values()), default=None)


def uptime(started_mono: float | None) -> float:
    """Seconds since `started_mono` (time.monotonic()), 0.0 before the start."""
    return round(time.monotonic() - started_mono, 3) if started_mono else 0.0


def filesystem_views(filesystems: Iterable, pressure_running: set[int]) -> list[FilesystemView]:
    """`/status`'s `filesystems` from the scheduler's `FilesystemState`s."""
    return [FilesystemView(mountpoint=fs.mountpoint, logs=list(fs.logs), used_ratio=fs.used_ratio,
                           total_bytes=fs.total_bytes, free_bytes=fs.free_bytes, pressure=LEVEL_NAMES[fs.level],
                           forcing=fs.forcing, checked_at=iso(fs.checked_at),
                           pressure_pass_running=fs.dev in pressure_running)
            for fs in filesystems]


def _log_disk(fs) -> LogDisk:
    if fs is None:
        return LogDisk(mountpoint=None, used_ratio=None, total_bytes=None, free_bytes=None, pressure=None)
    return LogDisk(mountpoint=fs.mountpoint, used_ratio=fs.used_ratio, total_bytes=fs.total_bytes,
                   free_bytes=fs.free_bytes, pressure=LEVEL_NAMES[fs.level])


def log_views(config: RetentionConfig, ledger, filesystems: Iterable,
              manual: Mapping[str, ManualTrigger]) -> list[LogStatus]:
    """`/status`'s `logs`: each configured log's settings, disk, last seen state (`ledger`, the
    scheduler's `PassLedger`) and the manual passes its policy has left."""
    by_log_fs = {n: fs for fs in filesystems for n in fs.logs}
    logs = []
    for name, log in config.logs.items():
        state, last = ledger.view(name)
        trigger = manual.get(log.policy)
        logs.append(LogStatus(
            name=name, path=str(log.path), policy=log.policy,
            interval_seconds=config.policies[log.policy].interval,
            retention_bytes=config.policy_for(name).retention_bytes,
            # A log's overrides, and the policy they make in force for it (None: its policy's own).
            overrides=log.model_dump(mode="json")["overrides"],
            policy_in_force=_policy_fields(config.policy_for(name)) if log.overrides else None,
            disk=_log_disk(by_log_fs.get(name)),
            **(state or empty_state(is_log_directory(str(log.path)))),
            manual_passes_left=trigger.remaining if trigger else 0,
            last_pass=last,
        ))
    return logs


def budget_views(config: RetentionConfig, logs: Iterable[LogStatus]) -> dict[str, BudgetView]:
    """`/status`'s `budgets`: each budget's bytes and use, each log's weight, floor, share and size
    as its last pass saw it (`used_bytes` null until every log of the budget was seen)."""
    sizes = {log.name: log.bytes for log in logs}
    views = {}
    for name, budget in config.budgets.items():
        parts = [BudgetLogView(name=log, weight=part.weight, floor_bytes=part.floor, share_bytes=budget.share(log),
                               bytes=sizes.get(log)) for log, part in budget.logs.items()]
        known = [part.bytes for part in parts if part.bytes is not None]
        used = sum(known) if len(known) == len(parts) else None
        views[name] = BudgetView(bytes=budget.bytes, used_bytes=used, over=used is not None and used > budget.bytes,
                                 logs=parts)
    return views


def empty_state(exists: bool) -> dict:
    return {"exists": exists, "segments": None, "bytes": None, "start_offset": None, "end_offset": None,
            "triggers": [], "hung": [], "pinned": [], "pinned_bytes": 0, "consumer_groups": [],
            "stale_groups": [], "error": None, "as_of": None, "dead_bytes": None, "owned_by": None}


def _note_pins(state: dict, r: LogPassResult) -> None:
    state["pinned"] = [{"pid": p.pid, "command": p.command, "path": p.path, "bytes": p.bytes, "how": p.how}
                       for p in r.pinned]
    state["pinned_bytes"] = pinned_bytes(r.pinned)


def carried_state(before: dict, r: LogPassResult) -> dict:
    """What a pass that carried log `r` (`LogPassResult.unchanged`) shows of it: what its last
    plan saw (`before`, `describe_log`'s), with the processes pinning its deleted files now."""
    state = dict(before)
    _note_pins(state, r)
    return state


def describe_log(watched, r: LogPassResult) -> dict:
    """What the pass saw of one log, for /status and the gauges (read under the filesystem lock)."""
    exists = r.snapshot is not None or watched.exists()     # the pass read it: no second stat
    state = empty_state(exists)
    state["error"] = r.error
    state["owned_by"] = {"pid": r.owner_pid} if r.owned_elsewhere else None
    _note_pins(state, r)
    if r.plan is None:
        state["segments"], state["bytes"] = 0, 0
        return state
    plan = r.plan
    remaining = [d for d in plan.decisions if r.actions.get(d.base_offset) != DELETED]
    # A pass examines only the oldest segments it could delete and the active one; the segments in
    # between (`not_examined`) are counted from their files (full ones, or compacted and time-rolled short ones).
    not_examined = getattr(r, "not_examined", 0) or 0
    gap = (plan.decisions[-2].end_offset, plan.decisions[-1].base_offset) if not_examined and len(plan.decisions) > 1 else None
    not_examined_bytes = getattr(r, "not_examined_bytes", 0) or 0
    mean_not_examined = not_examined_bytes / not_examined if not_examined else 0
    state["segments"] = len(remaining) + not_examined
    state["bytes"] = sum(d.bytes for d in remaining) + not_examined_bytes
    state["triggers"] = list(plan.triggers)
    state["stale_groups"] = list(plan.stale_groups)
    end = plan.decisions[-1].end_offset if plan.decisions else None
    state["end_offset"] = end
    snap = r.snapshot
    try:
        if snap is not None and r.start_offset is not None and not r.deleted and not r.removed_by_another:
            # Nothing went from the head: what the pass read of the log still stands.
            start = r.start_offset
            committed = {g.name: g.committed_offset for g in snap.groups}
            times = {g.name: g.last_commit_at for g in snap.groups if g.last_commit_at}
        else:
            log = watched.log
            start = log.start_offset
            committed = log.committed()
            times = log.commit_times()
        hung = watched.hung.snapshot()
        state["dead_bytes"] = watched.log.dead_bytes()
    except Exception as exc:  # noqa: BLE001 (the status is best effort)
        state["error"] = state["error"] or str(exc)
        return state
    finally:
        watched.release_if_tight()     # the pass let it go: so does its status
    state["start_offset"] = start
    if end is None:
        end = start
        state["end_offset"] = end
    now = time.time()
    state["hung"] = [{"segment": segment_name(base), "base_offset": base,
                      "first_attempt_at": iso(h.first_attempt_at), "last_attempt_at": iso(h.last_attempt_at),
                      "held_seconds": round(now - h.first_attempt_at, 3)}
                     for base, h in sorted(hung.items())]
    state["consumer_groups"] = _group_views(committed, times, remaining, plan.stale_groups, start, end,
                                            gap, not_examined, mean_not_examined)
    return state


def _group_views(committed: dict, times: dict, remaining: list, stale: Iterable[str], start: int, end: int,
                 gap: tuple[int, int] | None, not_examined: int, mean_not_examined: float) -> list[dict]:
    """Each consumer group's offset and lag: records to the end, and the bytes of the segments at
    or after its offset (those a pass did not examine, `not_examined` in the `gap`, counted at
    their mean size)."""
    groups = []
    for group, offset in sorted(committed.items()):
        lag_bytes = sum(d.bytes for d in remaining if d.end_offset > offset)
        if gap is not None:
            lag_bytes += round(_gap_segments(gap, not_examined, offset) * mean_not_examined)
        groups.append({"group": group, "committed_offset": offset, "lag_records": max(0, end - offset),
                       "lag_bytes": lag_bytes, "last_commit_at": iso(times.get(group)),
                       "stale": group in stale, "behind_start": offset < start})
    return groups


def _gap_segments(gap: tuple[int, int], count: int, committed: int) -> int:
    """Of `count` unexamined segments spanning offsets [gap), about how many hold offsets at or
    after `committed` (by offsets, as if the segments held equally many records)."""
    first, end = gap
    if committed <= first:
        return count
    if committed >= end or end <= first:
        return 0
    return math.ceil(count * (end - committed) / (end - first))
