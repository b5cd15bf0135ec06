"""Health: what each log's last pass did, whether every log is passed on time, and readiness.

`PassLedger` keeps, per configured log, when it was first configured, its last pass (or pass error)
and what that pass saw (for `/status`), and turns a pass into metrics and a history entry.
Thread-safe: every method takes the ledger's lock.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timezone

from loguru import logger

from commitlog.damage import describe as describe_damage
from commitlog.layout import DAMAGE_FILE
from policies import DELETED, FAILED, HUNG, RetentionConfig

from ..deletion.results import LogPassResult, PassResult
from .history import StatusHistory
from .metrics import ERROR, FAILED_OUTCOME, HUNG_OUTCOME, INTERRUPTED, OK, OWNED_ELSEWHERE, RetentionMetrics
from .problems import (LOG_DAMAGED, LOG_MISSING, LOG_NO_DESCRIPTORS, LOG_OWNED_ELSEWHERE, LOG_PERMISSION_DENIED,
                       PASSES_FAILING, PASSES_LATE, Problem)
from .statusview import carried_state, describe_log, iso, primary_trigger

# The order of a log's problems (`PassLedger.problems`).
_KIND_ORDER = {kind: i for i, kind in enumerate((PASSES_LATE, PASSES_FAILING, LOG_MISSING, LOG_OWNED_ELSEWHERE,
                                                   LOG_DAMAGED, LOG_PERMISSION_DENIED, LOG_NO_DESCRIPTORS))}

__all__ = ["PassLedger", "log_outcome", "merge_results", "pass_outcome"]

_MESSAGE_MAX = 600                  # characters of a damage record's description in a problem


class PassLedger:
    """Per log: first configured (monotonic), last pass, last state; readiness once every log passed."""

    def __init__(self, metrics: RetentionMetrics, history: StatusHistory) -> None:
        self.metrics = metrics
        self.history = history
        self._lock = threading.Lock()
        self._since: dict[str, float] = {}
        self._last_pass: dict[str, dict] = {}
        self._state: dict[str, dict] = {}
        self._passed: set[str] = set()
        self._failures: dict[str, tuple[int, str]] = {}   # failed passes in a row, the last error
        self._existed: set[str] = set()                   # logs whose directory was seen
        self._missing: set[str] = set()                   # ... and is gone at the last pass
        self._told_absent: set[str] = set()               # never seen, said so once
        self._owned_elsewhere: dict[str, str] = {}        # log -> why it is left alone
        self._damaged: dict[str, str] = {}                # log -> its damage record, described
        self._denied: dict[str, str] = {}                 # log -> why its user may not read or write it
        self._no_descriptors: dict[str, str] = {}         # log -> why it could not be owned or opened
        self._recorded: dict[str, LogPassResult] = {}     # log -> the carried result its last pass recorded, passed
        self._ready = False
        self._changes = 0                                 # records, errors and configurations, counted
        self._found: tuple | None = None                  # (changes, config, valid until, problems)

    def configure(self, names: Iterable[str]) -> None:
        """Keep only the logs `names`; a new one counts for health from now."""
        names = set(names)
        now = time.monotonic()
        with self._lock:
            self._changes += 1
            self._found = None               # a new log's lateness counts from now: walked again
            for name in list(self._since):
                if name not in names:
                    self._since.pop(name)
                    self._last_pass.pop(name, None)
                    self._state.pop(name, None)
                    self._failures.pop(name, None)
                    self._existed.discard(name)
                    self._missing.discard(name)
                    self._owned_elsewhere.pop(name, None)
                    self._damaged.pop(name, None)
                    self._denied.pop(name, None)
                    self._no_descriptors.pop(name, None)
                    self._recorded.pop(name, None)
                    self.metrics.forget_log(name)
            for name in names:
                self._since.setdefault(name, now)

    def ready(self, names: Iterable[str]) -> bool:
        with self._lock:
            if not self._ready and set(names) <= self._passed:
                self._ready = True
            return self._ready

    def not_passed(self, names: Iterable[str]) -> list[str]:
        """The logs of `names` with no pass recorded yet (what readiness waits for)."""
        with self._lock:
            return sorted(set(names) - self._passed)

    def problems(self, config: RetentionConfig) -> list[Problem]:
        """Per log: no completed pass for more than three of its intervals (passes-late); its last
        `failed_passes_unhealthy` passes failed (passes-failing); its directory, seen before, is
        gone (log-missing); its damage record holds entries (log-damaged); its user may not read
        or write it (log-permission-denied). Asked every disk check: the answer is kept until a pass
        is recorded, the configuration changes or a log may turn late; the logs are walked only
        when one may have turned late since the last walk (`_late`), the other problems come
        from the logs that hold one. In the order of the configuration's logs."""
        now = time.monotonic()
        with self._lock:
            found = self._found
            if found is not None and found[1] is config and now <= found[2]:
                if found[0] == self._changes:
                    return list(found[3])
                late, late_at = [], found[2]      # none turns late before: a log's last pass only moves on
            else:
                late, late_at = self._late(config, now)
            problems = late + self._held(config)
            if late and len(problems) > len(late):
                order = {name: i for i, name in enumerate(config.logs)}
                problems.sort(key=lambda p: (order[p.subject], _KIND_ORDER[p.kind]))
            self._found = (self._changes, config, late_at, list(problems))
        return problems

    def _late(self, config: RetentionConfig, now: float) -> tuple[list[Problem], float]:
        """(the passes-late problems now, the earliest moment another log may turn late): a walk
        of every log (under the lock)."""
        problems, late_at = [], float("inf")
        for name in config.logs:
            interval = config.policy_for(name).interval
            last = self._last_pass.get(name, {}).get("_end_mono") or self._since.get(name, now)
            late_at = min(late_at, last + 3 * interval)
            if now - last > 3 * interval:
                problems.append(Problem(PASSES_LATE, name, f"no completed pass for {now - last:.0f}s "
                                        f"(more than 3 intervals of {interval:g}s)"))
        return problems, late_at

    def _held(self, config: RetentionConfig) -> list[Problem]:
        """The problems but passes-late, from the logs that hold one (under the lock)."""
        failing = config.service.failed_passes_unhealthy
        found = [Problem(PASSES_FAILING, name, f"the last {count} passes failed: {error}")
                 for name, (count, error) in self._failures.items() if count >= failing]
        found += [Problem(LOG_MISSING, name, f"the log directory {config.logs[name].path} existed and is gone")
                  for name in self._missing if name in config.logs]
        for kind, held in ((LOG_OWNED_ELSEWHERE, self._owned_elsewhere), (LOG_DAMAGED, self._damaged),
                           (LOG_PERMISSION_DENIED, self._denied), (LOG_NO_DESCRIPTORS, self._no_descriptors)):
            found += [Problem(kind, name, message) for name, message in held.items()]
        order = {name: i for i, name in enumerate(config.logs)} if len(found) > 1 else {}
        found = [p for p in found if p.subject in config.logs]
        found.sort(key=lambda p: (order.get(p.subject, 0), _KIND_ORDER[p.kind]))
        return found

    def _count_failure(self, name: str, error: str | None) -> None:
        count, _ = self._failures.get(name, (0, ""))
        self._failures[name] = (count + 1, error or "failed")

    def view(self, name: str) -> tuple[dict | None, dict | None]:
        """(what the last pass saw, the last pass without internal fields) of log `name`."""
        with self._lock:
            state = self._state.get(name)
            last = self._last_pass.get(name)
        return (dict(state) if state else None,
                {k: v for k, v in last.items() if not k.startswith("_")} if last else None)

    def error(self, names: list[str], kind: str, exc: Exception, duration: float, at: float) -> None:
        """A pass over `names` raised: counted, shown, but health keeps counting from the last real pass."""
        self.metrics.observe_pass(kind, ERROR, duration)
        self.history.passed({"at": iso(at), "kind": kind, "logs": names, "outcome": ERROR, "deleted": 0,
                             "freed_bytes": 0, "duration_seconds": round(duration, 6), "error": str(exc)})
        with self._lock:
            self._changes += 1
            for name in names:
                previous = self._last_pass.get(name, {})
                self._recorded.pop(name, None)
                self._count_failure(name, str(exc))
                self._last_pass[name] = {
                    "at": iso(at), "finished_at": iso(at), "kind": kind, "deleted": 0, "freed_bytes": 0,
                    "outcome": ERROR, "error": str(exc), "duration_seconds": round(duration, 6),
                    "_end_mono": previous.get("_end_mono"),
                    "last_success_at": previous.get("last_success_at"),
                }

    def record(self, watched: dict, config: RetentionConfig, result: PassResult, kind: str,
               end_wall: float) -> None:
        """A pass ended: per log its state, outcome, deletions by trigger, gauges; then the pass."""
        end_mono = time.monotonic()
        outcomes: list[str] = []
        stamp = (result.at.isoformat(), iso(end_wall), kind, round(result.duration, 6), end_mono)
        rest, passed = self._record_carried(result, stamp, outcomes)
        described = []
        for r in rest:
            with self._lock:
                before = self._state.get(r.name) if r.unchanged else None
            state = carried_state(before, r) if before is not None else describe_log(watched[r.name], r)
            state["as_of"] = stamp[0]
            outcome = log_outcome(r, result.interrupted, state["exists"])
            outcomes.append(outcome)
            if before is None or before["pinned_bytes"] != state["pinned_bytes"]:
                self._count_log(r, state, config)     # a carried log's gauges stand as they are
            described.append((r, state, outcome))
        with self._lock:     # at once: a problem many logs share starts or clears in one look, one line
            for r, state, outcome in described:
                self._state[r.name] = state
                self._note_pass(r, outcome, stamp, watched[r.name].path)
        passed += [r.name for r, _, outcome in described if outcome in (OK, HUNG_OUTCOME)]
        self.metrics.set_last_successes(passed, end_wall)
        self._count_budgets(config)
        outcome = pass_outcome(outcomes)
        self.metrics.observe_pass(kind, outcome, result.duration)
        self.history.passed({"at": result.at.isoformat(), "kind": kind, "logs": [r.name for r in result.logs],
                             "outcome": outcome, "deleted": result.deleted, "freed_bytes": result.freed_bytes,
                             "duration_seconds": round(result.duration, 6)})

    def _record_carried(self, result: PassResult, stamp: tuple, outcomes: list[str],
                        ) -> tuple[list[LogPassResult], list[str]]:
        """The carried logs of `result` that nothing pins and whose last recorded state pinned
        nothing, recorded under one taking of the lock: their state is the one recorded, its
        `as_of` moved (no copy, no gauge: their figures stand). One recorded at the last pass as
        the same carried result, passed and with nothing to note, shares this pass's last-pass
        entry (`_carried_ok`): its conditions, failures and presence stand. (The results not
        recorded here, the names of those recorded that passed.) The loop is the idle pass's
        cost per log: it keeps to local names."""
        rest, passed = [], []
        shared = None if result.interrupted else {}
        as_of = stamp[0]
        with self._lock:
            recorded, states, last_pass = self._recorded, self._state, self._last_pass
            for r in result.logs:
                name = r.name
                state = states.get(name) if r.unchanged and not r.pinned else None
                if state is None or state["pinned"]:
                    rest.append(r)
                    continue
                state["as_of"] = as_of
                if shared is not None and recorded.get(name) is r:
                    if not shared:
                        shared = _carried_ok(stamp)
                    last_pass[name] = shared
                    passed.append(name)
                    continue
                outcome = log_outcome(r, result.interrupted, state["exists"])
                outcomes.append(outcome)
                self._note_pass(r, outcome, stamp, r.path)
                if outcome in (OK, HUNG_OUTCOME):
                    passed.append(name)
                if outcome == OK and not (r.deleted or r.deleted_bytes or r.rolled or r.error or r.errors):
                    recorded[name] = r
            if shared:
                outcomes.append(OK)
                self._changes += 1
        return rest, passed

    def _note_pass(self, r: LogPassResult, outcome: str, stamp: tuple, path: str) -> None:
        """Log `r`'s last pass (`stamp`: at, finished at, kind, duration, monotonic end), its
        failures and conditions, after its pass (under the lock)."""
        finished = stamp[1]
        success = outcome in (OK, HUNG_OUTCOME)
        self._recorded.pop(r.name, None)
        previous = self._last_pass.get(r.name, {})
        self._last_pass[r.name] = _last_pass_entry(
            stamp, r.deleted, r.deleted_bytes, outcome, r.rolled,
            r.error or (next(iter(r.errors.values())) if r.errors else None),
            finished if success else previous.get("last_success_at"))
        self._changes += 1
        self._passed.add(r.name)
        self._note_conditions(r)
        if outcome == FAILED_OUTCOME:
            self._count_failure(r.name, self._last_pass[r.name]["error"])
        elif success:
            self._failures.pop(r.name, None)
        self._note_presence(r, self._state[r.name]["exists"], path)

    def _count_budgets(self, config: RetentionConfig) -> None:
        """Each budget's gauges: its bytes, its logs' bytes together (as their last passes left
        them; None until each was seen) and each log's share."""
        budgets = {}
        with self._lock:
            for name, budget in config.budgets.items():
                sizes = [(self._state.get(log) or {}).get("bytes") for log in budget.logs]
                used = None if None in sizes else sum(sizes)
                budgets[name] = (budget.bytes, used, {log: budget.share(log) for log in budget.logs})
        self.metrics.set_budgets(budgets)

    def _count_log(self, r: LogPassResult, state: dict, config: RetentionConfig) -> None:
        """The metrics of log `r` after its pass (`state`: its described state)."""
        if r.rolled:
            self.metrics.rolled_segments.labels(r.name).inc()
        if r.paced_seconds:
            self.metrics.delete_pacing.labels(r.name).inc(r.paced_seconds)
        if r.plan is not None:
            for d in r.plan.decisions:
                if r.actions.get(d.base_offset) == DELETED:
                    self.metrics.deleted(r.name, primary_trigger(d, r.plan.triggers), d.bytes)
        self.metrics.set_log(r.name, segments=state["segments"], bytes=state["bytes"],
                             hung=len(state["hung"]), pinned_bytes=state["pinned_bytes"],
                             hung_oldest_seconds=max((h["held_seconds"] for h in state["hung"]), default=0.0),
                             hung_force_after=config.policy_for(r.name).hung.force_after,
                             dead_bytes=state["dead_bytes"],
                             retention_bytes=config.policy_for(r.name).retention_bytes)
        self.metrics.set_lag(r.name, {g["group"]: (g["lag_bytes"], g["lag_records"])
                                      for g in state["consumer_groups"]})

    def _note_conditions(self, r: LogPassResult) -> None:
        """Owned elsewhere, damaged, permission denied: what log `r`'s pass found (under the lock).
        A log owned elsewhere keeps what its owner's last pass here found."""
        if r.owned_elsewhere:
            self._owned_elsewhere[r.name] = r.error or "another process owns it"
        else:
            self._owned_elsewhere.pop(r.name, None)
        if r.damage:
            self._damaged[r.name] = (f"{len(r.damage)} damage entries in "
                                     f"{os.path.join(r.path, DAMAGE_FILE)}, the last: "
                                     f"{describe_damage(r.damage[-1])}")[:_MESSAGE_MAX]
        elif not r.owned_elsewhere:
            self._damaged.pop(r.name, None)
        if r.no_descriptors:
            self._no_descriptors[r.name] = r.no_descriptors
        else:
            self._no_descriptors.pop(r.name, None)
        if r.permission_denied:
            self._denied[r.name] = r.permission_denied
        elif not r.owned_elsewhere:
            self._denied.pop(r.name, None)

    def _note_presence(self, r: LogPassResult, exists: bool, path: str) -> None:
        """Whether log `r`'s directory exists: gone after it existed is a problem (under the lock)."""
        if exists:
            self._existed.add(r.name)
            self._missing.discard(r.name)
        elif r.name in self._existed:
            self._missing.add(r.name)
        elif r.cache is None and r.name not in self._told_absent:
            self._told_absent.add(r.name)
            # Normal before the first write (problems.py): said once, not a WARNING.
            logger.info("log {}: directory {} does not exist yet; nothing to clean until a "
                        "writer creates it", r.name, path)


def _last_pass_entry(stamp: tuple, deleted: int, freed: int, outcome: str, rolled: bool, error: str | None,
                     last_success_at: str | None) -> dict:
    """A log's last-pass entry at `stamp` (at, finished at, kind, duration, monotonic end)."""
    at, finished, kind, duration, end_mono = stamp
    return {"at": at, "finished_at": finished, "kind": kind, "deleted": deleted, "freed_bytes": freed,
            "outcome": outcome, "rolled": rolled, "error": error, "duration_seconds": duration,
            "_end_mono": end_mono, "last_success_at": last_success_at}


def _carried_ok(stamp: tuple) -> dict:
    """The last-pass entry `PassLedger._note_pass` makes for a carried log that passed, deleted,
    rolled and failed nothing, at `stamp`: the same for every such log of one pass (never changed after)."""
    return _last_pass_entry(stamp, 0, 0, OK, False, None, stamp[1])


def log_outcome(r: LogPassResult, interrupted: bool, exists: bool) -> str:
    if r.owned_elsewhere:
        return OWNED_ELSEWHERE
    actions = set(r.actions.values())
    if FAILED in actions or (r.error and r.plan is not None):
        return FAILED_OUTCOME
    if r.plan is None:
        # a log the writer has not created yet is nothing to do; anything else (corrupt) failed
        return OK if not exists else FAILED_OUTCOME
    if interrupted and any(d.action == "delete" and d.base_offset not in r.actions for d in r.plan.decisions):
        return INTERRUPTED
    if HUNG in actions:
        return HUNG_OUTCOME
    return OK

def pass_outcome(outcomes: list[str]) -> str:
    for o in (FAILED_OUTCOME, INTERRUPTED, HUNG_OUTCOME, OWNED_ELSEWHERE):
        if o in outcomes:
            return o
    return OK

def merge_results(results: list[PassResult], *, executed: bool, clock: Callable[[], float]) -> PassResult:
    """One result for a pass that ran filesystem by filesystem."""
    if not results:
        return PassResult(datetime.fromtimestamp(clock(), timezone.utc), [], executed=executed)
    logs = [log for r in results for log in r.logs]
    return PassResult(results[0].at, logs, executed=executed, duration=sum(r.duration for r in results),
                      interrupted=any(r.interrupted for r in results))
