"""The retention scheduler: cleanup passes on an interval, on disk pressure and for hung segments,
and compaction passes.

`RetentionScheduler(config)` runs inside any process (the sidecar's, or an application's own, as
RocketMQ's broker runs its CleanCommitLogService)::

    from retention import RetentionScheduler
    scheduler = RetentionScheduler(load_config("conf/retention.yaml"))
    scheduler.start()            # returns at once; the work runs in background threads
    ...
    scheduler.stop()             # cuts a running pass short between two files, then returns

The jobs (`cleanup:POLICY`, `hung:POLICY`, `disk-check`, `compact:POLICY`, the roll watch) are
described in `retention.scheduling.jobs`.

Passes are per filesystem: logs are grouped by the filesystem holding them, each group has its own
`Cleaner` and lock, so at most one pass runs per filesystem at a time while different disks are
cleaned independently. A pressure pass covers every log on its filesystem, so the globally oldest
segment goes first whatever policy its log has. A pass that raises is logged and counted
(`retention_passes_total{outcome="error"}`) and never stops the scheduler; APScheduler's job errors,
missed runs and skipped runs are logged and counted (`retention_scheduler_job_events_total`).

`reload(config)` applies a new configuration without a restart: jobs are rescheduled (new
intervals), added or removed (policies), the per-filesystem cleaners are swapped (logs, hours,
ratios), a running pass is cut short between two files and its logs get a `resumed` pass at once
on the new settings (not an interval later). Open manual triggers carry over.

Rooms: `jobs` (APScheduler wiring), `pressure` (readings, levels, back-to-back passes), `rollwatch`
(inotify), `filesystems` (logs grouped by disk), `health` (per-log pass ledger, readiness),
`statusview` (the `/status` object). This module is the facade that ties them together.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from apscheduler.schedulers.base import STATE_RUNNING, STATE_STOPPED
from loguru import logger

from commitlog.layout import HUNG_FILE
from policies import LEVEL_CLEAN, LEVEL_FORCE, LEVEL_OK, LEVEL_REFUSE, ManualTrigger, RetentionConfig

from ..audit import AuditTrail
from ..deletion.cleaner import Cleaner
from ..compaction.summary import CompactionResult
from .compactions import CompactionPasses
from ..compaction.compactor import Pending
from ..deletion.results import PassResult
from .filesystems import Filesystem, build_filesystems, log_devs
from .health import PassLedger
from .problems import DISK_CHECK_STALLED, RELOAD_FAILED, SCHEDULER_STOPPED, HealthProblems, Problem
from .history import StatusHistory
from .jobs import (DEFAULT_POOL, JOB_DISK, add_once, describe_jobs, desired_jobs, list_jobs, new_scheduler,
                   sync_jobs)
from .manual import ManualPasses, PassRunningError, open_triggers
from .metrics import OK, RetentionMetrics
from .pressure_watch import PressureWatch
from .rollwatch import RollWatch
from .statusview import LAG_NOTE, build_status, iso, primary_trigger

_REGROUP_EVERY = 10.0     # seconds between two looks for a log directory moved to another filesystem

__all__ = ["RetentionScheduler", "PassRunningError", "LEVEL_OK", "LEVEL_CLEAN", "LEVEL_FORCE", "LEVEL_REFUSE",
           "LAG_NOTE", "primary_trigger"]


class RetentionScheduler:
    """Retention inside a process: background cleanup passes by interval, disk pressure and hung
    segments, with metrics and a status report.

    config: the validated configuration (`policies.load_config`).
    metrics: where to count (default: a `RetentionMetrics` with a registry of its own).
    clock: epoch seconds for the cleaners' plans and the audit trail (default `time.time`).
    on_pass: called as `on_pass(kind, result)` after every pass (`kind` one of interval, pressure,
      hung-retry, manual; `result` a `PassResult`), from the thread that ran it.
    max_workers: threads for passes (created only as passes run concurrently).
    watch_rolls: check a filesystem when a segment is prepared or rolled there (inotify); default
      `service.watch_rolls` of the configuration, followed on reload.
    pending: compaction's pending-ranges hook (`retention.compaction.compactor`; default: the Spark ledger's).

    Thread-safe: `clean()`, `plan()`, `status()`, `health()` and `reload()` may be called from any
    thread while it runs.
    """

    def __init__(self, config: RetentionConfig, *, metrics: RetentionMetrics | None = None,
                 clock: Callable[[], float] = time.time,
                 on_pass: Callable[[str, PassResult], object] | None = None,
                 max_workers: int = DEFAULT_POOL, watch_rolls: bool | None = None,
                 pending: Pending | None = None) -> None:
        self.metrics = metrics if metrics is not None else RetentionMetrics()
        self.history = StatusHistory()                  # for the status page (retention/web/page.py)
        self._clock = clock
        self._on_pass = on_pass
        self._scheduler = new_scheduler(max_workers, self.metrics)
        self._apply_lock = threading.RLock()
        self._locks_lock = threading.Lock()
        self._fs_locks: dict[int, threading.Lock] = {}
        self._manual = ManualPasses()
        self._stopping = threading.Event()
        self._started = False
        self._stopped = False
        self._retired: list[Cleaner] = []
        self._heartbeat: float | None = None            # monotonic time of the last disk check
        self._started_mono: float | None = None
        self.loaded_at = time.time()
        self._config = config
        self._audit = AuditTrail(str(config.service.audit))
        self.ledger = PassLedger(self.metrics, self.history)
        self.problems = HealthProblems(self.metrics.health_problems)
        self.reload_error: str | None = None            # the last reload's failure, until a good one
        self._filesystems: dict[int, Filesystem] = build_filesystems(config, {}, self._new_cleaner)
        self._log_devs = {n: fs.dev for fs in self._filesystems.values() for n in fs.logs}
        self.pressure = PressureWatch(
            metrics=self.metrics, history=self.history, filesystems=lambda: self._filesystems,
            run_pass=lambda dev: self._run_pass(dev, kind="pressure"),
            schedule=lambda func, args, job_id: add_once(self._scheduler, func, args, job_id),
            stopping=self._stopping, compact=lambda dev: self.compactions.after_pressure(dev))
        self.compactions = CompactionPasses(
            config=lambda: self._config, filesystems=lambda: self._filesystems, audit=lambda: self._audit,
            metrics=self.metrics, clock=clock, stopping=self._stopping, pending=pending)
        self._watch_rolls = watch_rolls
        self._regrouped = time.monotonic()
        self._rolls: RollWatch | None = None

    def _new_cleaner(self, config: RetentionConfig) -> Cleaner:
        return Cleaner(config, clock=self._clock, audit=self._audit)

    # ------------------------------------------------------------------ lifecycle
    @property
    def config(self) -> RetentionConfig:
        return self._config

    @property
    def running(self) -> bool:
        return self._scheduler.state == STATE_RUNNING and not self._stopping.is_set()

    def start(self) -> None:
        """Start the background scheduler; the first pass of every policy runs right away."""
        with self._apply_lock:
            if self._started:
                raise RuntimeError("RetentionScheduler.start() was already called")
            self._started = True
            self._started_mono = time.monotonic()
            self.ledger.configure(self._config.logs)
            self._publish_config(self._config)
            self.metrics.last_reload.set(self.loaded_at)
            self._scheduler.start()
            self._sync_jobs(self._config, first=True)
            self._watch_logs()
        logger.info("retention scheduler started: {}", describe_jobs(self.jobs()))

    def stop(self, timeout: float = 10.0) -> None:
        """Stop: a running pass ends before its next file (never between a rename and its unlink),
        no new pass starts, the jobs are removed; returns when the passes have ended (or `timeout`
        seconds after, for one stuck in a system call)."""
        if self._stopped:
            return
        self._stopped = True
        self._stopping.set()
        with self._apply_lock:
            filesystems = list(self._filesystems.values())
            retired = list(self._retired)
            rolls, self._rolls = self._rolls, None
        if rolls is not None:
            rolls.close()
        for cleaner in [fs.cleaner for fs in filesystems] + retired:
            cleaner.stop()
        if self._scheduler.state != STATE_STOPPED:
            self._scheduler.shutdown(wait=True)
        deadline = time.monotonic() + timeout
        self.compactions.wait(timeout)
        for fs in filesystems:
            lock = self._fs_lock(fs.dev)
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
        self.loaded_at = time.time()
        self.reload_error = None
        self.metrics.reload(OK, self.loaded_at)

    def _apply(self, config: RetentionConfig) -> None:
        with self._apply_lock:
            if self._stopping.is_set():
                return
            old = self._filesystems
            if str(config.service.audit) != self._audit.path:
                self._audit = AuditTrail(str(config.service.audit))
            manual = self._open_manual(config)
            new = build_filesystems(config, old, self._new_cleaner)
            for fs in new.values():   # not shared with any thread yet
                fs.cleaner.manual.update(manual)
            self._config = config
            self._filesystems = new
            self._log_devs = {n: fs.dev for fs in new.values() for n in fs.logs}
            self.ledger.configure(config.logs)
            self._publish_config(config)
            retired = [fs.cleaner for fs in old.values()]
            self._retired.extend(retired)
            for cleaner in retired:
                cleaner.stop()         # a running pass ends before its next file
            if self._started:
                self._sync_jobs(config, first=False)
                self._watch_logs()
        threading.Thread(target=self._close_retired, args=(old,), name="retention-retire",
                         daemon=True).start()

    def _watch_logs(self) -> None:
        wanted = self._watch_rolls if self._watch_rolls is not None else self._config.service.watch_rolls
        if wanted and self._rolls is None:
            self._rolls = RollWatch(self.pressure.check)
        elif not wanted and self._rolls is not None:
            self._rolls.close()
            self._rolls = None
            logger.info("no longer watching log directories for segment rolls")
        if self._rolls is not None:
            self._rolls.sync({str(self._config.logs[n].path): fs.dev
                              for fs in self._filesystems.values() for n in fs.logs})

    def _open_manual(self, config: RetentionConfig) -> dict[str, ManualTrigger]:
        return open_triggers(self._filesystems.values(), config)

    def _close_retired(self, old: dict[int, Filesystem]) -> None:
        for fs in old.values():
            with self._fs_lock(fs.dev):       # its pass, if any, has ended
                fs.cleaner.close()
            with self._apply_lock:
                if fs.cleaner in self._retired:
                    self._retired.remove(fs.cleaner)

    def _publish_config(self, config: RetentionConfig) -> None:
        used = sorted({log.policy for log in config.logs.values()})
        self.metrics.set_policies({p: config.policies[p].interval for p in used})
        self.metrics.keep_mountpoints({fs.mountpoint for fs in self._filesystems.values()})

    def _desired_jobs(self, config: RetentionConfig):
        return desired_jobs(config, cleanup=self._cleanup_job, hung=self._hung_job,
                            disk_check=self._disk_check_job, compact=self.compactions.job)

    def _sync_jobs(self, config: RetentionConfig, *, first: bool) -> None:
        sync_jobs(self._scheduler, self._desired_jobs(config), first=first)

    def jobs(self) -> list[dict]:
        """The scheduled jobs: id, interval in seconds, next run time (ISO 8601, UTC)."""
        return list_jobs(self._scheduler)

    # ------------------------------------------------------------------ jobs
    def _fs_lock(self, dev: int) -> threading.Lock:
        with self._locks_lock:
            lock = self._fs_locks.get(dev)
            if lock is None:
                lock = self._fs_locks[dev] = threading.Lock()
            return lock

    def _filesystems_of(self, policy: str) -> list[int]:
        fss = self._filesystems
        return [dev for dev, fs in fss.items() if any(fs.config.logs[n].policy == policy for n in fs.logs)]

    def _cleanup_job(self, policy: str) -> None:
        for dev in self._filesystems_of(policy):
            self._run_pass(dev, kind="interval", policy=policy)

    def _hung_job(self, policy: str) -> None:
        for dev in self._filesystems_of(policy):
            fs = self._filesystems.get(dev)
            if fs is None:
                continue
            hung = {n for n in fs.logs if fs.config.logs[n].policy == policy
                    and os.path.exists(os.path.join(str(fs.config.logs[n].path), HUNG_FILE))}
            if hung:
                self._run_pass(dev, kind="hung-retry", policy=policy, only=hung)

    def _disk_check_job(self) -> None:
        now = self._heartbeat = time.monotonic()
        if now - self._regrouped >= _REGROUP_EVERY:
            # A stat per log: with a thousand logs, once a second would cost more than the check.
            self._regrouped = now
            try:
                devs = log_devs(self._config)
            except OSError as exc:
                logger.warning("disk check: {}", exc)
                devs = self._log_devs
            if devs != self._log_devs and not self._stopping.is_set():
                logger.info("a log directory moved to another filesystem; regrouping the logs")
                self._apply(self._config)
        rolls = self._rolls
        if rolls is not None and rolls.unwatched():
            rolls.retry()       # a log directory the writer has created since
        for dev in list(self._filesystems):
            self.pressure.check(dev)
        self.health_problems()          # problems start and clear in the log without a probe

    # ------------------------------------------------------------------ passes
    def _run_pass(self, dev: int, *, kind: str, policy: str | None = None,
                  only: set[str] | None = None) -> PassResult | None:
        """One pass over the logs of filesystem `dev` (those of `policy`, or all), under its lock.
        While the disk forces, the pass forces down to force_target (`policies.pressure`)."""
        with self._fs_lock(dev):
            if self._stopping.is_set():
                return None
            fs = self._filesystems.get(dev)
            if fs is None:
                return None
            names = [n for n in fs.logs if (policy is None or fs.config.logs[n].policy == policy)
                     and (only is None or n in only)]
            if not names:
                return None
            started = time.monotonic()
            try:
                result = fs.cleaner.run_pass(names=names, forcing=fs.forcing)
            except Exception as exc:  # noqa: BLE001 (a pass that raises never stops the service)
                logger.opt(exception=exc).error("{} pass over {} raised: {}", kind, ", ".join(names), exc)
                self.ledger.error(names, kind, exc, time.monotonic() - started, self._clock())
                return None
            try:
                self.ledger.record(fs.cleaner.logs, fs.config, result, kind, self._clock())
                logger.debug("{} pass over {}: deleted {} ({} bytes) in {:.3f}s", kind, ", ".join(names),
                             result.deleted, result.freed_bytes, result.duration)
            except Exception as exc:  # noqa: BLE001
                logger.opt(exception=exc).error("recording the {} pass failed: {}", kind, exc)
        if result.interrupted and not self._stopping.is_set():
            self._resume(names, kind)
        if self._on_pass is not None:
            try:
                self._on_pass(kind, result)
            except Exception as exc:  # noqa: BLE001
                logger.opt(exception=exc).warning("on_pass callback raised: {}", exc)
        return result

    def _resume(self, names: list[str], kind: str) -> None:
        """A pass cut short by a reload: its logs get a pass now, on the configuration that
        replaced it, instead of waiting an interval (an hour, in a real configuration)."""
        by_dev: dict[int, set[str]] = {}
        for name in names:
            dev = self._log_devs.get(name)
            if dev is not None:                  # a log the new configuration dropped is left
                by_dev.setdefault(dev, set()).add(name)
        for dev, only in by_dev.items():
            logger.info("{} pass over {} was interrupted by a reload: resuming it now", kind,
                        ", ".join(sorted(only)))
            add_once(self._scheduler, self._resumed_pass, (dev, frozenset(only)),
                     f"resume:{dev}:{min(only)}")

    def _resumed_pass(self, dev: int, only: frozenset[str]) -> None:
        self._run_pass(dev, kind="resumed", only=set(only))

    # ------------------------------------------------------------------ on demand
    def clean(self, *, force: bool = False) -> PassResult:
        """A manual trigger: open `manual_passes` passes that ignore the hour window (and, with
        `force`, the reserve) for every policy, and run the first one now over every log. Returns
        that pass (one result across all filesystems). A manual pass covers every filesystem, so at
        most one runs at a time: a call while one runs raises `PassRunningError` naming it."""
        return self._manual.run(list(self._filesystems.values()),
                                lambda dev: self._run_pass(dev, kind="manual"), force=force, clock=self._clock)

    def compact(self, *, dry_run: bool = False) -> CompactionResult:
        """One compaction pass now over every log whose policy has compaction enabled (the object
        `retention compact --json` prints). PassRunningError, naming it, when a compaction runs on
        any of their filesystems; `dry_run`: what it would do, nothing changed."""
        return self.compactions.run_all(dry_run=dry_run)

    def plan(self, *, manual: bool = False, force: bool = False) -> PassResult:
        """What a pass would do now, for every log (the object `retention plan --json` prints).
        Open manual triggers count; `manual`/`force` plan as if one were opened now."""
        config = self._config
        planner = self._new_cleaner(config)
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
        return self._liveness_problem() is None

    def _liveness_problem(self) -> Problem | None:
        if self._scheduler.state != STATE_RUNNING or self._stopping.is_set():
            return Problem(SCHEDULER_STOPPED, "", "the scheduler is not running"
                           + (" (stopping)" if self._stopping.is_set() else ""))
        every = self._desired_jobs(self._config)[JOB_DISK].every
        allowed = max(3 * every, 5.0)
        since = self._heartbeat if self._heartbeat is not None else self._started_mono
        late = time.monotonic() - since if since is not None else None
        if late is None or late > allowed:
            return Problem(DISK_CHECK_STALLED, "", f"the disk check last ran {late or 0:.0f}s ago "
                           f"(allowed {allowed:g}s)")
        return None

    def health(self) -> tuple[bool, list[str]]:
        """(healthy, problems): the health contract (`retention.scheduling.problems`). Evaluating it logs each
        problem's start and end once; the sidecar evaluates it every second or two, `/healthz` on
        every probe."""
        problems = self.health_problems()
        return not problems, [p.describe() for p in problems]

    def health_problems(self) -> list[Problem]:
        """The active problems (evaluated now, transitions logged)."""
        found = self.ledger.problems(self._config)
        liveness = self._liveness_problem()
        if liveness is not None:
            found.append(liveness)
        if self.reload_error is not None:
            found.append(Problem(RELOAD_FAILED, "", f"an older configuration runs (loaded "
                                 f"{iso(self.loaded_at)}): {self.reload_error}"))
        return self.problems.update(found)

    def reload_failed(self, error: str) -> None:
        """A reload was refused (the service's SIGHUP): unhealthy until a good reload."""
        self.reload_error = error
        self.metrics.reload("error")
        self.health_problems()

    @property
    def ready(self) -> bool:
        """Started, not stopping, and the first pass over every log (finishing interrupted
        removals) is done."""
        return not self.not_ready_reasons()

    def not_ready_reasons(self) -> list[str]:
        """Why the sidecar is not ready (empty when it is)."""
        if not self._started:
            return ["the scheduler has not started"]
        if not self.running:
            return ["the scheduler is stopping" if self._stopping.is_set() else "the scheduler is not running"]
        if not self._config.logs or self.ledger.ready(self._config.logs):
            return []
        waiting = self.ledger.not_passed(self._config.logs)
        return [f"the first pass has not finished for log {name}" for name in waiting]

    def status(self) -> dict:
        """The `/status` object (see `retention/web/server.py`)."""
        config = self._config
        healthy, problems = self.health()
        status = build_status(config=config, healthy=healthy, problems=problems, ready=self.ready,
                              filesystems=list(self._filesystems.values()), pressure_running=set(self.pressure.running),
                              manual=self._open_manual(config), ledger=self.ledger, jobs=self.jobs(),
                              audit=self._audit.path, loaded_at=self.loaded_at, started_mono=self._started_mono)
        status["compaction"] = self.compactions.status()
        status["health"] = {"problems": self.problems.describe_active(), "reload_error": self.reload_error,
                            "not_ready": self.not_ready_reasons()}
        return status


