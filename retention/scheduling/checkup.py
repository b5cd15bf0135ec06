"""The scheduler's side of the health contract (`retention.scheduling.problems`): whether its
thread runs and its disk check beats, the per-log problems of the pass ledger and of the archive uploads, a
failed reload;
and readiness. Evaluating logs each problem's start and end once (`HealthProblems`); the sidecar
evaluates every second or two, `/healthz` on every probe. Thread-safe: the fields it keeps are
single references replaced whole, and `HealthProblems` takes its own lock.
"""

from __future__ import annotations

import time

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.schedulers.base import STATE_RUNNING

from commitlog.access import cannot_append

from .health import PassLedger
from .jobs import disk_check_every
from .metrics import OK, RetentionMetrics
from ..archiving import Archiver
from ..archiving.cluster_keeper import ClusterKeeper
from .problems import (ARCHIVE_LAGGING, ARCHIVE_MISSING, AUDIT_UNWRITABLE, CLOCK_STEPPED, CLUSTER_LEASE_FAILING,
                       DISK_CHECK_STALLED, RELOAD_FAILED, SCHEDULER_STOPPED, STOPPING_ON_REQUEST, HealthProblems,
                       Problem)
from .scheduler_state import SchedulerState
from .statusview import iso

__all__ = ["HealthCheck"]


class HealthCheck:
    """Liveness, the named problems and readiness of one `RetentionScheduler`."""

    def __init__(self, state: SchedulerState, jobs: BackgroundScheduler, ledger: PassLedger,
                 metrics: RetentionMetrics, archiver: Archiver, cluster: ClusterKeeper | None = None) -> None:
        self._state = state
        self._archiver = archiver
        self._cluster = cluster
        self._jobs = jobs
        self._ledger = ledger
        self._metrics = metrics
        self.problems = HealthProblems(metrics.health_problems)
        self.loaded_at = time.time()                    # the running configuration's
        self.reload_error: str | None = None            # the last reload's failure, until a good one
        self.started_mono: float | None = None
        self._heartbeat: float | None = None            # monotonic time of the last disk check
        self._check_every: tuple[object, float] = (None, 1.0)   # (the configuration, its disk check's interval)

    def started(self) -> None:
        self.started_mono = time.monotonic()

    def beat(self) -> None:
        """The disk check ran."""
        self._heartbeat = time.monotonic()

    def reloaded(self, ok: bool, error: str | None = None) -> None:
        if ok:
            self.loaded_at = time.time()
            self.reload_error = None
            self._metrics.reload(OK, self.loaded_at)
        else:
            self.reload_error = error
            self._metrics.reload("error")
            self.evaluate()

    @property
    def running(self) -> bool:
        return self._jobs.state == STATE_RUNNING and not self._state.stopping.is_set()

    def liveness_problem(self) -> Problem | None:
        stopping = self._state.stopping.is_set()
        if self._jobs.state != STATE_RUNNING or stopping:
            return Problem(SCHEDULER_STOPPED, "", STOPPING_ON_REQUEST if stopping else "the scheduler is not running")
        allowed = max(3 * self._disk_check_every(), 5.0)
        since = self._heartbeat if self._heartbeat is not None else self.started_mono
        late = time.monotonic() - since if since is not None else None
        if late is None or late > allowed:
            return Problem(DISK_CHECK_STALLED, "", f"the disk check last ran {late or 0:.0f}s ago "
                           f"(allowed {allowed:g}s)")
        return None

    def _disk_check_every(self) -> float:
        """`disk_check_every` of the running configuration, worked out once per configuration (a
        look at every log: asked every second)."""
        config = self._state.config
        if self._check_every[0] is not config:
            self._check_every = (config, disk_check_every(config))
        return self._check_every[1]

    def restart_problem(self) -> Problem | None:
        """`/livez`: the liveness problem, unless the scheduler stops because it was asked to (the
        process is exiting; a restart would only cut its last pass short)."""
        return None if self._state.stopping.is_set() else self.liveness_problem()

    def evaluate(self) -> list[Problem]:
        """The active problems, evaluated now (transitions logged)."""
        found = self._ledger.problems(self._state.config)
        found.extend(Problem(ARCHIVE_LAGGING, log, message) for log, message in self._archiver.problems())
        found.extend(Problem(ARCHIVE_MISSING, log, message) for log, message in self._archiver.missing())
        if self._cluster is not None:
            found.extend(Problem(CLUSTER_LEASE_FAILING, log, message) for log, message in self._cluster.problems())
        liveness = self.liveness_problem()
        if liveness is not None:
            found.append(liveness)
        stepped = self._state.guard.describe()
        if stepped is not None:
            found.append(Problem(CLOCK_STEPPED, "", stepped))
        if self.reload_error is not None:
            found.append(Problem(RELOAD_FAILED, "", f"an older configuration runs (loaded "
                                 f"{iso(self.loaded_at)}): {self.reload_error}"))
        found.extend(audit_problems(str(self._state.config.service.audit)))
        return self.problems.update(found)

    def not_ready_reasons(self) -> list[str]:
        """Why the scheduler is not ready (empty when it is): not started, stopping, or the first
        pass over a log not finished."""
        if self.started_mono is None:
            return ["the scheduler has not started"]
        if not self.running:
            return ["the scheduler is stopping" if self._state.stopping.is_set() else "the scheduler is not running"]
        logs = self._state.config.logs
        if not logs or self._ledger.ready(logs):
            return []
        return [f"the first pass has not finished for log {name}" for name in self._ledger.not_passed(logs)]


def audit_problems(audit: str) -> list[Problem]:
    """`audit-unwritable` while this process cannot append to (or create) the audit trail `audit`:
    found from the first evaluation at start, not at the first deletion, which it would refuse."""
    why = cannot_append(audit)
    if why is None:
        return []
    return [Problem(AUDIT_UNWRITABLE, "", f"the audit trail {audit} cannot be written: {why}: no segment "
                    "is deleted until it can (planning goes on)")]
