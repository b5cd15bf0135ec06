"""Health problems: the named conditions `/healthz` lists, what each probe does about them, and
their transitions.

`/healthz` is 503 while any problem is active, except a warning (`WARNINGS`: listed, 200);
`/livez` is 503 only for the problems a restart can fix (`RESTART_HELPS`). Each problem is a
`ProblemKind` (each member documents its condition) and a subject (a log name, or "" for the
process). `HealthProblems.update` takes the full set of active problems each time it is evaluated,
logs exactly one WARNING when a problem starts and one INFO when it clears (a stop on request is
INFO), and keeps the gauge `retention_health_problems{problem}` (every kind always exported).
The health contract, with what an operator does about each: docs/operations.md, "Health".
Thread-safe: every method takes the tracker's lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from enum import StrEnum
from typing import NamedTuple

from loguru import logger

__all__ = ["CRITICAL", "KINDS", "RESTART_HELPS", "WARNING", "WARNINGS", "HealthProblems", "Problem", "ProblemKind"]


class ProblemKind(StrEnum):
    """A health problem's kind (its value is what `/healthz`, `/status` and the gauge show)."""

    SCHEDULER_STOPPED = "scheduler-stopped"
    """The scheduler is not running (stopped, or stopping). Stopping on request (SIGTERM,
    SIGINT) is listed too, but is no fault: its start is an INFO line, not a WARNING."""
    DISK_CHECK_STALLED = "disk-check-stalled"
    """The disk check has not run for max(3 x disk_check_interval, 5 s)."""
    PASSES_FAILING = "passes-failing"
    """A log's last `service.failed_passes_unhealthy` passes failed or could not read it (a
    corrupt log, a read-only mount, a pass that raised)."""
    PASSES_LATE = "passes-late"
    """A log had no completed pass for more than three of its intervals."""
    LOG_MISSING = "log-missing"
    """A log directory that existed in this process's life is gone (a directory never created
    yet is normal: a writer creates it)."""
    LOG_OWNED_ELSEWHERE = "log-owned-elsewhere"
    """Another process owns the log's retention (a second sidecar)."""
    RELOAD_FAILED = "reload-failed"
    """A warning: the last reload failed, so an older configuration runs and cleans (until a
    good reload); a restart would fail on the same file."""
    ARCHIVE_LAGGING = "archive-lagging"
    """A log's oldest segment due for upload to its archive tier has waited longer than its
    `archive.lag_unhealthy` (the tier is down or refuses it, or uploads cannot keep up): nothing
    it holds can be evicted locally meanwhile."""
    LOG_DAMAGED = "log-damaged"
    """A writer's open found damage in the log's last segment and recorded it in the log's
    `damage.json` (records lost, saved aside, or offsets skipped; commitlog.damage): active
    until the operator has dealt with it and removed that file (docs/troubleshooting.md)."""
    CLOCK_STEPPED = "clock-stepped"
    """The wall clock jumped forward past `service.clock_step_threshold` (between two looks, or
    ahead of the newest time on disk at start): what only the step would expire or make stale
    waits until `retention clock accept` (`POST /clock/accept`) or the clock returns."""
    ARCHIVE_MISSING = "archive-missing"
    """A log's archive tier cannot prove it is the tier the log archived to (its `tier-
    identity.json` is gone or another: an unmounted directory, a bucket recreated empty), lost
    its manifest while this host's copy lists segments, or lacks objects its manifest lists.
    Uploads to it and evictions of what it lists wait; nothing is reset
    (`commitlog.archive.identity`)."""
    LOG_PERMISSION_DENIED = "log-permission-denied"
    """The sidecar's user may not read a log's directory (nothing is planned; never taken for a
    log not created yet), or may read but not write it (planned and read, nothing deleted); the
    message names the path, the user, and the mode and owner it met."""
    LOG_NO_DESCRIPTORS = "log-no-descriptors"
    """The sidecar cannot own a log (its `.retention.lock`, a descriptor held) or open it for
    lack of file descriptors: its claims reached the open-files limit less a reserve, or the
    system ran out. The log is not cleaned; the process goes on with the others."""
    AUDIT_UNWRITABLE = "audit-unwritable"
    """The sidecar's user cannot append to the audit trail (or create it): no deletion happens
    unaudited, so none happens; planning goes on (`commitlog.access`)."""
    CLUSTER_LEASE_FAILING = "cluster-lease-failing"
    """The lease on a cluster log's archive tier (`commitlog.archive.lease`) cannot be read or
    renewed (the tier is down, refuses, or holds a damaged term): no sidecar may be running that
    log's retention on the tier. Another sidecar owning it is no problem."""


SCHEDULER_STOPPED, DISK_CHECK_STALLED = ProblemKind.SCHEDULER_STOPPED, ProblemKind.DISK_CHECK_STALLED
PASSES_FAILING, PASSES_LATE, LOG_MISSING = ProblemKind.PASSES_FAILING, ProblemKind.PASSES_LATE, ProblemKind.LOG_MISSING
LOG_OWNED_ELSEWHERE, RELOAD_FAILED = ProblemKind.LOG_OWNED_ELSEWHERE, ProblemKind.RELOAD_FAILED
ARCHIVE_LAGGING, LOG_DAMAGED, CLOCK_STEPPED = ProblemKind.ARCHIVE_LAGGING, ProblemKind.LOG_DAMAGED, ProblemKind.CLOCK_STEPPED
ARCHIVE_MISSING, LOG_PERMISSION_DENIED = ProblemKind.ARCHIVE_MISSING, ProblemKind.LOG_PERMISSION_DENIED
LOG_NO_DESCRIPTORS = ProblemKind.LOG_NO_DESCRIPTORS
AUDIT_UNWRITABLE, CLUSTER_LEASE_FAILING = ProblemKind.AUDIT_UNWRITABLE, ProblemKind.CLUSTER_LEASE_FAILING
KINDS = tuple(ProblemKind)
WARNINGS = frozenset({RELOAD_FAILED})
"""Listed by `/healthz` (and `/status`, the page, the gauge) while it answers 200: the sidecar still
cleans (with its older configuration), and a restart would fail on the same file."""
RESTART_HELPS = frozenset({SCHEDULER_STOPPED, DISK_CHECK_STALLED})
"""The problems a restart can fix, so `/livez` (the liveness probe, systemd's watchdog) fails on them
and on nothing else: every other kind would come back after a restart, or clears by itself."""
STOPPING_ON_REQUEST = "the scheduler is stopping on request"
"""The message of `scheduler-stopped` while the process stops because it was asked to."""
CRITICAL, WARNING = "critical", "warning"       # a problem's severity, as `/healthz` and `/status` say it


class Problem(NamedTuple):
    kind: str
    subject: str       # a log name, or "" for the process as a whole
    message: str

    @property
    def severity(self) -> str:
        """`warning` for the kinds of `WARNINGS` (`/healthz` stays 200), else `critical`."""
        return WARNING if self.kind in WARNINGS else CRITICAL

    def describe(self) -> str:
        where = f"log {self.subject}: " if self.subject else ""
        return f"{self.kind}: {where}{self.message}"

    def as_json(self, since: float | None = None) -> dict:
        out = {"problem": self.kind, "log": self.subject or None, "message": self.message, "severity": self.severity}
        if since is not None:
            out["since"] = datetime.fromtimestamp(since, timezone.utc).isoformat()
        return out


LINES_A_KIND = 10      # transitions of one kind at once logged a line each; more: one line for them all


def _log_transitions(what: str, problems: list[Problem], log: Callable[..., None]) -> None:
    """One line a problem that `what` ("started", "cleared"); past `LINES_A_KIND` of one kind at
    once (a first pass over 10,000 logs making each late), one line for the kind: its count, the
    first subjects and the first message."""
    by_kind: dict[str, list[Problem]] = {}
    for problem in problems:
        by_kind.setdefault(problem.kind, []).append(problem)
    for kind, same in by_kind.items():
        if len(same) <= LINES_A_KIND:
            for problem in same:
                log("health: problem {}: {}", what, problem.describe())
            continue
        subjects = ", ".join(p.subject for p in same[:LINES_A_KIND])
        log("health: problem {} for {:,} logs: {} ({}, ...); the first: {}", what, len(same), kind, subjects,
            same[0].describe())


class HealthProblems:
    """The active problems, their start times, and the one-line-per-transition log."""

    def __init__(self, gauge=None) -> None:
        self._gauge = gauge
        self._lock = threading.Lock()
        self._active: dict[tuple[str, str], Problem] = {}
        self._since: dict[tuple[str, str], float] = {}     # wall time each active problem started
        for kind in KINDS:
            self._set_gauge(kind, 0)

    def update(self, problems: list[Problem], *, kinds: tuple[str, ...] = KINDS) -> list[Problem]:
        """Make `problems` the active ones among `kinds` (problems of other kinds are left as they
        are); log the transitions; return every active problem, oldest first."""
        wanted = {(p.kind, p.subject): p for p in problems if p.kind in kinds}
        with self._lock:
            cleared = [p for key, p in self._active.items() if key[0] in kinds and key not in wanted]
            for problem in cleared:
                del self._active[(problem.kind, problem.subject)]
                self._since.pop((problem.kind, problem.subject), None)
            _log_transitions("cleared", cleared, logger.info)
            started = [p for key, p in wanted.items() if key not in self._active]
            for problem in started:
                self._since[(problem.kind, problem.subject)] = time.time()
            # A stop that was asked for is listed (the sidecar no longer cleans) but is no fault.
            _log_transitions("started", [p for p in started if p.message == STOPPING_ON_REQUEST], logger.info)
            _log_transitions("started", [p for p in started if p.message != STOPPING_ON_REQUEST], logger.warning)
            self._active.update(wanted)         # the newest messages (figures change)
            counts = {kind: 0 for kind in kinds}
            for kind, _ in self._active:
                if kind in counts:
                    counts[kind] += 1
            for kind, count in counts.items():
                self._set_gauge(kind, count)
            return list(self._active.values())

    def active(self) -> list[Problem]:
        with self._lock:
            return list(self._active.values())

    def describe_active(self) -> list[dict]:
        """The active problems as JSON objects with the time each started (`/status`)."""
        with self._lock:
            return [p.as_json(self._since.get(key)) for key, p in self._active.items()]

    def _set_gauge(self, kind: str, value: int) -> None:
        if self._gauge is not None:
            self._gauge.labels(problem=kind).set(value)
