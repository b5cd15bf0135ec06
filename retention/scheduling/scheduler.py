"""The retention scheduler: cleanup passes on an interval, on disk pressure and for hung segments,
and compaction passes.

`RetentionScheduler(config)` runs inside any process (the sidecar's, or an application's own)::

    scheduler = RetentionScheduler(load_config("conf/retention.yaml"))
    scheduler.start()            # returns at once; the work runs in background threads
    scheduler.stop()             # cuts a running pass short between two files, then returns

At most one pass per filesystem at a time (a `Cleaner` and a lock per filesystem); a pass that
raises is logged and counted, never stops the scheduler. `reload(config)` applies a new
configuration without a restart: jobs rescheduled, added or removed, cleaners swapped, a running
pass cut short and its logs given a `resumed` pass at once; open manual triggers carry over. The
jobs and why: docs, Operations, "What the sidecar does, and when". This module is the facade over
its rooms (scheduler_state, passes, pressure_watch, compaction_passes, jobs, rollwatch,
filesystems, health, checkup, statusview).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from apscheduler.schedulers.base import STATE_STOPPED
from loguru import logger

from policies import LEVEL_CLEAN, LEVEL_FORCE, LEVEL_OK, LEVEL_REFUSE, ManualTrigger, RetentionConfig

from ..archiving import ARCHIVE_PREFIX, Archiver
from ..archiving.archive_metrics import ArchiveMetrics
from ..archiving.cluster_keeper import ClusterKeeper
from ..compaction.compactor import Pending
from ..compaction.summary import CompactionResult
from ..deletion.cleaner import Cleaner
from ..deletion.clockguard import newest_time
from ..deletion.results import PassResult
from .checkup import HealthCheck
from .compaction_passes import CompactionPasses
from .disk_check import DiskCheck
from .filesystems import Filesystem
from .health import PassLedger
from .history import StatusHistory
from .jobs import (DEFAULT_POOL, JobSpec, add_once, describe_jobs, desired_jobs, list_jobs, new_scheduler, run_now,
                   sync_jobs)
from .manual import ManualPasses, PassRunningError, open_triggers
from .metrics import RetentionMetrics
from .passes import DeletionPasses
from .pressure_watch import PressureWatch
from .problems import WARNING, Problem
from .scheduler_state import SchedulerState
from .status_models import Status
from .statusview import (LAG_NOTE, budget_views, filesystem_views, iso, log_views, policy_views, primary_trigger,
                         shortest_interval, uptime)


__all__ = ["RetentionScheduler", "PassRunningError", "LEVEL_OK", "LEVEL_CLEAN", "LEVEL_FORCE", "LEVEL_REFUSE",
           "LAG_NOTE", "primary_trigger"]


class RetentionScheduler:
    """Retention inside a process: background cleanup passes by interval, disk pressure and hung
    segments, with metrics and a status report.

    config: the validated configuration (`policies.load_config`).
    metrics: where to count (default: a `RetentionMetrics` with a registry of its own).
    clock: epoch seconds for the cleaners' plans and the audit trail (default `time.time`).
    on_pass: called as `on_pass(kind, result)` after every pass (`kind` one of interval, pressure,
      hung-retry, manual, resumed; `result` a `PassResult`), from the thread that ran it.
    max_workers: threads for passes (created only as passes run concurrently).
    watch_rolls: check a filesystem when a segment is prepared or rolled there (inotify); default
      `service.watch_rolls` of the configuration, followed on reload.
    pending: compaction's pending-ranges hook (`retention.compaction.compactor`; default: the
      installed protectors').

    Thread-safe: `clean()`, `plan()`, `status()`, `health()` and `reload()` may be called from any
    thread while it runs.
    """

    def __init__(self, config: RetentionConfig, *, metrics: RetentionMetrics | None = None,
                 clock: Callable[[], float] = time.time,
                 on_pass: Callable[[str, PassResult], object] | None = None,
                 max_workers: int = DEFAULT_POOL, watch_rolls: bool | None = None,
                 pending: Pending | None = None, config_source: str = "in-process configuration") -> None:
        self.config_source = config_source   # named in /status, /plan, /clean: which file a sidecar runs
        self.metrics = metrics if metrics is not None else RetentionMetrics()
        self.history = StatusHistory()                  # for the status page (retention/web/page.py)
        self._scheduler = new_scheduler(max_workers, self.metrics)
        self._state = state = SchedulerState(config, clock)
        self._manual = ManualPasses()
        self._started = False
        self._stopped = False
        self._retired: list[Cleaner] = []
        self.ledger = PassLedger(self.metrics, self.history)
        self.archiver = Archiver(ArchiveMetrics(self.metrics.registry), clock=clock, stopping=state.stopping,
                                 expiry_clock=state.guard.judged, on_listed=self._archived)
        self.cluster = ClusterKeeper(judged=state.guard.judged, clock=clock, stopping=state.stopping)
        self.checkup = HealthCheck(state, self._scheduler, self.ledger, self.metrics, self.archiver, self.cluster)
        self.problems = self.checkup.problems
        self.passes = DeletionPasses(state, self.ledger, self._scheduler, on_pass=on_pass,
                                     rediscover=self._rediscover,
                                     forced=lambda dev: self.pressure.check(dev, forced=True))
        self.compactions = CompactionPasses(state, metrics=self.metrics, pending=pending,
                                            marks=lambda: self.disk_check.marks)
        self.pressure = PressureWatch(state, metrics=self.metrics, history=self.history,
                                      run_pass=self.passes.pressure, schedule=self._once,
                                      compact=self.compactions.after_pressure, upload_now=self._upload_now)
        self.disk_check = DiskCheck(state, self.checkup, self.pressure, regroup=lambda: self._apply(state.config),
                                    publish_clock=self._publish_clock, watch_rolls=watch_rolls)

    def _once(self, func: Callable, args: tuple, job_id: str) -> None:
        add_once(self._scheduler, func, args, job_id)

    def _upload_now(self, dev: int) -> None:
        """A disk force on filesystem `dev` starts the upload runs of its archiving logs at once."""
        fs = self._state.filesystems.get(dev)
        for name in self.archiver.kick(list(fs.logs) if fs is not None else []):
            run_now(self._scheduler, ARCHIVE_PREFIX + name)

    def _archived(self, name: str) -> None:
        """Log `name`'s manifest lists more: a forcing filesystem holding it evicts them now."""
        for dev, fs in list(self._state.filesystems.items()):
            if name in fs.logs and fs.forcing:
                self.pressure.check(dev)

    # ------------------------------------------------------------------ lifecycle
    @property
    def config(self) -> RetentionConfig:
        return self._state.config

    @property
    def running(self) -> bool:
        return self.checkup.running

    @property
    def loaded_at(self) -> float:
        return self.checkup.loaded_at

    @property
    def reload_error(self) -> str | None:
        return self.checkup.reload_error

    def start(self) -> None:
        """Start the background scheduler; the first pass of every policy runs right away."""
        state = self._state
        with state.apply_lock:
            if self._started:
                raise RuntimeError("RetentionScheduler.start() was already called")
            self._started = True
            self.checkup.started()
            state.guard.start(newest_time([str(log.path) for log in state.config.logs.values()], state.audit.path))
            self._publish_clock()
            self.ledger.configure(state.config.logs)
            self._publish_config(state.config)
            self.metrics.last_reload.set(self.checkup.loaded_at)
            self._scheduler.start()
            self._sync_jobs(state.config, first=True)
            self.disk_check.watch()
        # A killed sidecar's interrupted compactions, settled now: not a compaction.interval later.
        self.compactions.start_settle()
        logger.info("retention scheduler started: {}", describe_jobs(self.jobs()))

    def stop(self, timeout: float = 10.0) -> None:
        """Stop: a running pass ends before its next file (never between a rename and its unlink),
        no new pass starts, the jobs are removed; returns when the passes have ended (or `timeout`
        seconds after, for one stuck in a system call)."""
        if self._stopped:
            return
        self._stopped = True
        state = self._state
        state.stopping.set()
        with state.apply_lock:
            filesystems = list(state.filesystems.values())
            retired = list(self._retired)
            self.disk_check.close()
        for cleaner in [fs.cleaner for fs in filesystems] + retired:
            cleaner.stop()
        if self._scheduler.state != STATE_STOPPED:
            self._scheduler.shutdown(wait=True)
        self.archiver.close()
        deadline = time.monotonic() + timeout
        self.compactions.wait(timeout)
        for fs in filesystems:
            lock = state.fs_lock(fs.dev)
            if lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
                try:
                    fs.cleaner.close()
                finally:
                    lock.release()
        logger.debug("retention scheduler stopped")

    def __enter__(self) -> RetentionScheduler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ configuration
    def reload(self, config: RetentionConfig) -> None:
        """Apply `config` without a restart (see the module docstring)."""
        self._apply(config)
        self.checkup.reloaded(True)

    def reload_failed(self, error: str) -> None:
        """A reload was refused (the service's SIGHUP): unhealthy until a good reload."""
        self.checkup.reloaded(False, error)

    def _apply(self, config: RetentionConfig) -> None:
        state = self._state
        with state.apply_lock:
            if state.stopping.is_set():
                return
            old = state.filesystems
            manual = self._open_manual(config)
            new = state.regroup(config)
            for fs in new.values():   # not shared with any thread yet
                fs.cleaner.manual.update(manual)
            state.install(config, new)
            self.ledger.configure(config.logs)
            self._publish_config(config)
            retired = [fs.cleaner for fs in old.values()]
            self._retired.extend(retired)
            for cleaner in retired:
                cleaner.stop()         # a running pass ends before its next file
            if self._started:
                self._sync_jobs(config, first=False)
                self.disk_check.watch()
        threading.Thread(target=self._close_retired, args=(old,), name="retention-retire",
                         daemon=True).start()

    def _rediscover(self) -> None:
        """The `discover` roots read again: logs come or gone are applied as a reload of the same file."""
        new = rediscovered(self._state.config)
        if new is not None:
            self._apply(new)

    def _open_manual(self, config: RetentionConfig) -> dict[str, ManualTrigger]:
        return open_triggers(self._state.filesystems.values(), config)

    def _close_retired(self, old: dict[int, Filesystem]) -> None:
        for fs in old.values():
            with self._state.fs_lock(fs.dev):       # its pass, if any, has ended
                fs.cleaner.close()
            with self._state.apply_lock:
                if fs.cleaner in self._retired:
                    self._retired.remove(fs.cleaner)

    def _publish_config(self, config: RetentionConfig) -> None:
        used = sorted({log.policy for log in config.logs.values()})
        self.metrics.set_policies({p: config.policies[p].interval for p in used})
        self.metrics.keep_mountpoints({fs.mountpoint for fs in self._state.filesystems.values()})

    def _sync_jobs(self, config: RetentionConfig, *, first: bool) -> None:
        uploads = self.archiver.sync(config, self._state.audit)
        jobs = desired_jobs(config, cleanup=self.passes.interval, hung=self.passes.hung_retry,
                            disk_check=self.disk_check.run, compact=self.compactions.job,
                            upload=self.archiver.upload, uploads=uploads)
        for job_id, every in self.cluster.sync(config, self._state.audit).items():   # cluster logs' tiers
            jobs[job_id] = JobSpec(self.cluster.run, (job_id.split(":", 1)[1],), every, "archive")
        sync_jobs(self._scheduler, jobs, first=first)

    def jobs(self) -> list[dict]:
        """The scheduled jobs: id, interval in seconds, next run time (ISO 8601, UTC)."""
        return list_jobs(self._scheduler)

    # ------------------------------------------------------------------ on demand
    def clean(self, *, force: bool = False) -> PassResult:
        """A manual trigger: open `manual_passes` passes that ignore the hour window (and, with
        `force`, the reserve) for every policy, and run the first one now over every log. Returns
        that pass (one result across all filesystems). A manual pass covers every filesystem, so at
        most one runs at a time: a call while one runs raises `PassRunningError` naming it."""
        return self._manual.run(list(self._state.filesystems.values()), self.passes.manual, force=force,
                                clock=self._state.clock)

    def accept_clock(self) -> dict:
        """The operator accepts the wall clock after a forward step (`retention clock accept`): what
        only the step made due goes from the next pass. Returns what was accepted
        (`ClockGuard.accept`)."""
        accepted = self._state.guard.accept()
        self._publish_clock()
        self.checkup.evaluate()
        return accepted

    def _publish_clock(self) -> None:
        self.metrics.clock_step.set((self._state.guard.state() or {}).get("step_seconds", 0.0))

    def compact(self, *, dry_run: bool = False) -> CompactionResult:
        """One compaction pass now over every log whose policy has compaction enabled (the object
        `retention compact --json` prints). PassRunningError, naming it, when a compaction runs on
        any of their filesystems; `dry_run`: what it would do, nothing changed."""
        return self.compactions.run_all(dry_run=dry_run)

    def plan(self, *, manual: bool = False, force: bool = False) -> PassResult:
        """What a pass would do now, for every log (the object `retention plan --json` prints).
        Open manual triggers count; `manual`/`force` plan as if one were opened now."""
        config = self._state.config
        planner = self._state.new_cleaner(config)
        try:
            planner.manual.update(self._open_manual(config))
            if manual or force:
                planner.trigger_manual(force=force)
            return planner.plan()
        finally:
            planner.close()

    # ------------------------------------------------------------------ health and status
    def alive(self) -> bool:
        """The scheduler thread runs and its disk check ran recently."""
        return self.checkup.liveness_problem() is None

    def health(self) -> tuple[bool, list[str]]:
        """(healthy, problems): the health contract (`retention.scheduling.problems`), evaluated
        now (see `retention.scheduling.checkup`); a warning neither counts nor is listed here."""
        problems = [p for p in self.checkup.evaluate() if p.severity != WARNING]
        return not problems, [p.describe() for p in problems]

    def restart_problem(self) -> Problem | None:
        """What `/livez` fails on: a problem a restart can fix (`problems.RESTART_HELPS`), or None."""
        return self.checkup.restart_problem()

    def health_problems(self) -> list[Problem]:
        """The active problems (evaluated now, transitions logged)."""
        return self.checkup.evaluate()

    @property
    def ready(self) -> bool:
        """Started, not stopping, and the first pass over every log (finishing interrupted
        removals) is done."""
        return not self.checkup.not_ready_reasons()

    def not_ready_reasons(self) -> list[str]:
        """Why the sidecar is not ready (empty when it is)."""
        return self.checkup.not_ready_reasons()

    def status(self) -> dict:
        """The `/status` object (see `retention/web/server.py`): `status_report()` as JSON."""
        return self.status_report().to_json()

    def status_report(self) -> Status:
        """The `/status` answer (`retention.scheduling.status_models.Status`)."""
        state = self._state
        config = state.config
        found = self.checkup.evaluate()
        problems = [p.describe() for p in found if p.severity != WARNING]
        filesystems = list(state.filesystems.values())
        policies = policy_views(config)
        logs = log_views(config, self.ledger, filesystems, self._open_manual(config))
        return Status(
            service="retention", pid=os.getpid(), healthy=not problems, problems=problems, ready=self.ready,
            config_loaded_at=iso(self.checkup.loaded_at), uptime_seconds=uptime(self.checkup.started_mono),
            interval_seconds=shortest_interval(policies), policies=policies,
            filesystems=filesystem_views(filesystems, set(self.pressure.running)),
            logs=logs, jobs=self.jobs(), audit=state.audit.path, lag_note=LAG_NOTE,
            warnings=[p.describe() for p in found if p.severity == WARNING], config=self.config_source,
            clock=state.guard.state(),       # a forward step held (ClockGuard.state), or None
            compaction=self.compactions.status(), archive=self.archiver.status(), cluster=self.cluster.status(),
            budgets=budget_views(config, logs),
            health={"problems": self.problems.describe_active(), "reload_error": self.checkup.reload_error,
                    "not_ready": self.not_ready_reasons()})


def rediscovered(config: RetentionConfig) -> RetentionConfig | None:
    """`config` with its `discover` roots read again (`RetentionConfig.rediscovered`), logged;
    None when nothing came or went, or what came is refused or a root cannot be listed now (a
    WARNING: the logs found before stay)."""
    try:
        new = config.rediscovered()
    except (ValueError, OSError) as exc:      # pydantic's ValidationError: a name found clashes, say
        logger.warning("discover: the logs found now are refused, the ones found before stay: {}", exc)
        return None
    if new is not None:
        came, went = sorted(new.discovered - config.discovered), sorted(config.discovered - new.discovered)
        logger.info("discover: {} log directories came ({}), {} went ({})", len(came), ", ".join(came[:20]),
                    len(went), ", ".join(went[:20]))
    return new
