"""The retention scheduler: cleanup passes on an interval, on disk pressure and for hung segments.

`RetentionScheduler(config)` runs inside any process (the sidecar's, or an application's own, as
RocketMQ's broker runs its CleanCommitLogService)::

    from retention import RetentionScheduler
    scheduler = RetentionScheduler(load_config("conf/retention.yaml"))
    scheduler.start()            # returns at once; the work runs in background threads
    ...
    scheduler.stop()             # cuts a running pass short between two files, then returns

Jobs (APScheduler 3.x `BackgroundScheduler`, UTC inside, every job `max_instances=1`,
`coalesce=True`, `misfire_grace_time` at least its own interval):

- `cleanup:POLICY` every `interval`: one pass over the logs of POLICY, the first right after
  `start()` (a pass first finishes any `.deleted` file an interrupted removal left behind).
- `hung:POLICY` every `hung.retry_every`: a pass over the logs of POLICY that have hung segments, so
  a held segment is retried on time even when `interval` is longer.
- `disk-check` every `disk_check_interval` (the smallest of the policies in use; a statvfs per
  filesystem, microseconds): crossing `clean_ratio` or `force_ratio` upwards starts a pass over every
  log on that filesystem at once (`pressure:MOUNTPOINT`), and while the disk forces (above
  `force_ratio` with `disk.force`, or above `refuse_writes_ratio`), passes run back to back (each
  still `files_per_pass` per log, still pausing `pause_between_files`) until the ratio is below
  `force_ratio`; for a second after that the filesystem is checked every 50 ms, so a writer that
  resumes and pushes it straight back above gets the next pass at once.

Passes are per filesystem: logs are grouped by the filesystem holding them, each group has its own
`Cleaner` and lock, so at most one pass runs per filesystem at a time while different disks are
cleaned independently. A pressure pass covers every log on its filesystem, so the globally oldest
segment goes first whatever policy its log has. A pass that raises is logged and counted
(`retention_passes_total{outcome="error"}`) and never stops the scheduler; APScheduler's job errors,
missed runs and skipped runs are logged and counted (`retention_scheduler_job_events_total`).

`reload(config)` applies a new configuration without a restart: jobs are rescheduled (new
intervals), added or removed (policies), the per-filesystem cleaners are swapped (logs, hours,
ratios), a running pass is cut short between two files and the next one runs on the new settings.
Open manual triggers carry over.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.schedulers.base import STATE_RUNNING, STATE_STOPPED
from apscheduler.triggers.interval import IntervalTrigger
from loguru import logger

from commitlog import disk_usage
from commitlog.errors import CommitLogError
from policies import (DISK_CLEAN, DISK_FORCE, MANUAL, REFUSE_WRITES, TIME_WINDOW, ManualTrigger,
                      RetentionConfig, SegmentDecision)

from .audit import AuditTrail
from .cleaner import DELETED, FAILED, HUNG, Cleaner, LogPassResult, PassResult
from .history import StatusHistory
from .hung import HUNG_FILE
from .metrics import ERROR, FAILED_OUTCOME, HUNG_OUTCOME, INTERRUPTED, OK, THRESHOLDS, RetentionMetrics
from .pinned import pinned_bytes

__all__ = ["RetentionScheduler", "PassRunningError", "LEVEL_OK", "LEVEL_CLEAN", "LEVEL_FORCE", "LEVEL_REFUSE",
           "LAG_NOTE"]

LEVEL_OK, LEVEL_CLEAN, LEVEL_FORCE, LEVEL_REFUSE = 0, 1, 2, 3
LEVEL_NAMES = {LEVEL_OK: "ok", LEVEL_CLEAN: "clean", LEVEL_FORCE: "force", LEVEL_REFUSE: "refuse-writes"}

LAG_NOTE = ("lag_bytes is approximate: the bytes of the segment files at or after the committed "
            "offset (the active segment counts whole, as preallocated)")

_DEFAULT_POOL = 16          # threads are created lazily, only as jobs run concurrently
_JOB_DISK = "disk-check"
_HOT_POLL = 0.05           # seconds between two statvfs while a filesystem has just been under force
_HOT_WINDOW = 1.0          # seconds a filesystem stays closely watched after a pressure pass
_NO_TRIGGER = "none"

# APScheduler logs "Running job ..." and "... executed successfully" at INFO for every run, once a
# second for the disk check: keep its executors to warnings (missed runs, job errors).
# Its scheduler's "Added job" lines repeat ours. Both still log missed and skipped runs and errors.
logging.getLogger("apscheduler.executors").setLevel(logging.WARNING)
logging.getLogger("apscheduler.scheduler").setLevel(logging.WARNING)


class PassRunningError(CommitLogError, RuntimeError):
    """`clean()` while a manual pass already runs: the message names it. Passes are not queued."""


@dataclass(eq=False)
class _Filesystem:
    """The logs on one filesystem, the cleaner that passes over them and the latest disk reading."""

    dev: int
    mountpoint: str
    logs: tuple[str, ...]
    cleaner: Cleaner
    config: RetentionConfig
    used_ratio: float | None = None
    total_bytes: int = 0
    free_bytes: int = 0
    level: int = LEVEL_OK
    forcing: bool = False
    checked_at: float | None = None
    force_since: float | None = None

    def probe(self) -> str:
        return _existing(str(self.config.logs[self.logs[0]].path))

    def policies(self) -> list:
        return [self.config.policy_for(n) for n in self.logs]


def _existing(path: str) -> str:
    """`path`, or its nearest existing ancestor (a log directory may not exist yet)."""
    p = os.path.abspath(path)
    while not os.path.exists(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    return p


def _mountpoint(path: str) -> str:
    p = os.path.realpath(path)
    while not os.path.ismount(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    return p


def _dev(path: str) -> int:
    return os.stat(_existing(path)).st_dev


def _iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="milliseconds")


def primary_trigger(decision: SegmentDecision, triggers: Iterable[str]) -> str:
    """The trigger a deletion is counted under: the one that overrode a reason to keep it, else the
    most pressing active one (disk-force, refuse-writes, disk-clean, manual, time-window)."""
    if decision.overridden_by:
        return decision.overridden_by
    active = set(triggers)
    for t in (DISK_FORCE, REFUSE_WRITES, DISK_CLEAN, MANUAL, TIME_WINDOW):
        if t in active:
            return t
    return next(iter(triggers), _NO_TRIGGER)


class RetentionScheduler:
    """Retention inside a process: background cleanup passes by interval, disk pressure and hung
    segments, with metrics and a status report.

    config: the validated configuration (`policies.load_config`).
    metrics: where to count (default: a `RetentionMetrics` with a registry of its own).
    clock: epoch seconds for the cleaners' plans and the audit trail (default `time.time`).
    on_pass: called as `on_pass(kind, result)` after every pass (`kind` one of interval, pressure,
      hung-retry, manual; `result` a `PassResult`), from the thread that ran it.
    max_workers: threads for passes (created only as passes run concurrently).

    Thread-safe: `clean()`, `plan()`, `status()`, `health()` and `reload()` may be called from any
    thread while it runs.
    """

    def __init__(self, config: RetentionConfig, *, metrics: RetentionMetrics | None = None,
                 clock: Callable[[], float] = time.time,
                 on_pass: Callable[[str, PassResult], object] | None = None,
                 max_workers: int = _DEFAULT_POOL) -> None:
        self.metrics = metrics if metrics is not None else RetentionMetrics()
        self.history = StatusHistory()                  # for the status page (retention/page.py)
        self._clock = clock
        self._on_pass = on_pass
        self._scheduler = BackgroundScheduler(
            timezone=timezone.utc,
            executors={"default": ThreadPoolExecutor(max_workers), "disk": ThreadPoolExecutor(1)},
            job_defaults={"max_instances": 1, "coalesce": True})
        self._scheduler.add_listener(self._on_job_event,
                                     EVENT_JOB_ERROR | EVENT_JOB_MISSED | EVENT_JOB_MAX_INSTANCES)
        self._apply_lock = threading.RLock()
        self._state_lock = threading.Lock()
        self._measure_lock = threading.Lock()
        self._fs_locks: dict[int, threading.Lock] = {}
        self._manual_lock = threading.Lock()            # one manual pass at a time, never a queue
        self._manual_running: tuple[float, bool] | None = None   # (monotonic start, force)
        self._stopping = threading.Event()
        self._started = False
        self._stopped = False
        self._pressure_running: set[int] = set()
        self._retired: list[Cleaner] = []
        self._heartbeat: float | None = None            # monotonic time of the last disk check
        self._started_mono: float | None = None
        self._log_since: dict[str, float] = {}          # monotonic time each log was first configured
        self._last_pass: dict[str, dict] = {}           # per log: the last pass that covered it
        self._log_state: dict[str, dict] = {}           # per log: what the last pass saw
        self._initial_passes: set[str] = set()          # logs whose first pass is done
        self._ready = False
        self.loaded_at = time.time()
        self._config = config
        self._audit = AuditTrail(str(config.service.audit))
        self._filesystems: dict[int, _Filesystem] = self._build(config, {})
        self._log_devs = {n: fs.dev for fs in self._filesystems.values() for n in fs.logs}

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
            now = time.monotonic()
            for name in self._config.logs:
                self._log_since.setdefault(name, now)
            self._publish_config(self._config)
            self.metrics.last_reload.set(self.loaded_at)
            self._scheduler.start()
            self._sync_jobs(self._config, first=True)
        logger.info("retention scheduler started: {}", ", ".join(
            f"{j['id']} every {_g(j['interval_seconds'])}s" for j in self.jobs()))

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
        for fs in filesystems:
            fs.cleaner.stop()
        for cleaner in retired:
            cleaner.stop()
        if self._scheduler.state != STATE_STOPPED:
            self._scheduler.shutdown(wait=True)
        deadline = time.monotonic() + timeout
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
    def _build(self, config: RetentionConfig, old: dict[int, _Filesystem]) -> dict[int, _Filesystem]:
        groups: dict[int, list[str]] = {}
        for name, log in config.logs.items():
            groups.setdefault(_dev(str(log.path)), []).append(name)
        built = {}
        for dev, names in groups.items():
            cleaner = Cleaner(config, clock=self._clock, audit=self._audit)
            fs = _Filesystem(dev, _mountpoint(_existing(str(config.logs[names[0]].path))), tuple(names),
                             cleaner, config)
            before = old.get(dev)
            if before is not None:   # keep the reading, so a reload is not taken for a crossing
                fs.used_ratio, fs.total_bytes, fs.free_bytes = before.used_ratio, before.total_bytes, before.free_bytes
                fs.level, fs.forcing, fs.force_since = before.level, before.forcing, before.force_since
                fs.checked_at = before.checked_at
            built[dev] = fs
        return built

    def reload(self, config: RetentionConfig) -> None:
        """Apply `config` without a restart (see the module docstring)."""
        self._apply(config)
        self.loaded_at = time.time()
        self.metrics.reload(OK, self.loaded_at)

    def _apply(self, config: RetentionConfig) -> None:
        with self._apply_lock:
            if self._stopping.is_set():
                return
            old = self._filesystems
            if str(config.service.audit) != self._audit.path:
                self._audit = AuditTrail(str(config.service.audit))
            manual = self._open_manual(config)
            new = self._build(config, old)
            for fs in new.values():   # not shared with any thread yet
                fs.cleaner.manual.update(manual)
            self._config = config
            self._filesystems = new
            self._log_devs = {n: fs.dev for fs in new.values() for n in fs.logs}
            now = time.monotonic()
            with self._state_lock:
                for name in list(self._last_pass):
                    if name not in config.logs:
                        self._last_pass.pop(name, None)
                        self._log_state.pop(name, None)
                for name in list(self._log_since):
                    if name not in config.logs:
                        self._log_since.pop(name)
                        self.metrics.forget_log(name)
                for name in config.logs:
                    self._log_since.setdefault(name, now)
            self._publish_config(config)
            retired = [fs.cleaner for fs in old.values()]
            self._retired.extend(retired)
            for cleaner in retired:
                cleaner.stop()         # a running pass ends before its next file
            if self._started:
                self._sync_jobs(config, first=False)
        threading.Thread(target=self._close_retired, args=(old,), name="retention-retire",
                         daemon=True).start()

    def _open_manual(self, config: RetentionConfig) -> dict[str, ManualTrigger]:
        """Manual triggers still open in the running cleaners, for the policies `config` keeps."""
        merged: dict[str, ManualTrigger] = {}
        for fs in self._filesystems.values():
            for policy, trigger in dict(fs.cleaner.manual).items():
                if policy in config.policies and trigger.active:
                    if policy not in merged or trigger.remaining > merged[policy].remaining:
                        merged[policy] = trigger
        return merged

    def _close_retired(self, old: dict[int, _Filesystem]) -> None:
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

    def _desired_jobs(self, config: RetentionConfig) -> dict[str, tuple[Callable, tuple, float, str]]:
        used = sorted({log.policy for log in config.logs.values()})
        jobs: dict[str, tuple[Callable, tuple, float, str]] = {}
        for p in used:
            policy = config.policies[p]
            jobs[f"cleanup:{p}"] = (self._cleanup_job, (p,), policy.interval, "default")
            jobs[f"hung:{p}"] = (self._hung_job, (p,), policy.hung.retry_every, "default")
        every = min((config.policies[p].disk_check_interval for p in used), default=1.0)
        jobs[_JOB_DISK] = (self._disk_check_job, (), every, "disk")
        return jobs

    def _sync_jobs(self, config: RetentionConfig, *, first: bool) -> None:
        desired = self._desired_jobs(config)
        existing = {job.id: job for job in self._scheduler.get_jobs()}
        now = datetime.now(timezone.utc)
        for job_id, (func, args, every, executor) in desired.items():
            grace = max(1, math.ceil(every))      # at least one interval late is still run
            trigger = IntervalTrigger(seconds=every, timezone=timezone.utc)
            job = existing.get(job_id)
            if job is None:
                immediately = job_id.startswith("cleanup:") or job_id == _JOB_DISK
                extra = {"next_run_time": now} if immediately else {}
                self._scheduler.add_job(func, trigger, args=args, id=job_id, name=job_id,
                                        executor=executor, max_instances=1, coalesce=True,
                                        misfire_grace_time=grace, **extra)
                if not first:
                    logger.info("reload: added job {} every {}s", job_id, _g(every))
            else:
                current = job.trigger.interval.total_seconds() if isinstance(job.trigger, IntervalTrigger) else None
                if current is None or abs(current - every) > 1e-6:
                    self._scheduler.reschedule_job(job_id, trigger=trigger)
                    logger.info("reload: job {} now every {}s (was {}s)", job_id, _g(every), _g(current or 0))
                if job.misfire_grace_time != grace:
                    self._scheduler.modify_job(job_id, misfire_grace_time=grace)
        for job_id in existing:
            if job_id not in desired and not job_id.startswith("pressure:"):
                self._scheduler.remove_job(job_id)
                logger.info("reload: removed job {}", job_id)

    def jobs(self) -> list[dict]:
        """The scheduled jobs: id, interval in seconds, next run time (ISO 8601, UTC)."""
        out = []
        for job in self._scheduler.get_jobs():
            interval = job.trigger.interval.total_seconds() if isinstance(job.trigger, IntervalTrigger) else None
            nxt = getattr(job, "next_run_time", None)
            out.append({"id": job.id, "interval_seconds": interval,
                        "next_run_time": nxt.isoformat() if nxt else None,
                        "misfire_grace_time": job.misfire_grace_time})
        return sorted(out, key=lambda j: j["id"])

    # ------------------------------------------------------------------ jobs
    def _fs_lock(self, dev: int) -> threading.Lock:
        with self._state_lock:
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
        self._heartbeat = time.monotonic()
        try:
            devs = {n: _dev(str(log.path)) for n, log in self._config.logs.items()}
        except OSError as exc:
            logger.warning("disk check: {}", exc)
            devs = self._log_devs
        if devs != self._log_devs and not self._stopping.is_set():
            logger.info("a log directory moved to another filesystem; regrouping the logs")
            self._apply(self._config)
        for dev, fs in list(self._filesystems.items()):
            before = fs.level
            try:
                level, forcing = self._measure(fs)
            except OSError as exc:
                logger.warning("disk check of {}: {}", fs.mountpoint, exc)
                continue
            if forcing or (level > before and level >= LEVEL_CLEAN):
                self._request_pressure(dev)

    def _measure(self, fs: _Filesystem) -> tuple[int, bool]:
        """One statvfs of `fs`: update its reading, the metrics and the pressure level."""
        usage = disk_usage(fs.probe())
        ratio = usage.used_ratio
        policies = fs.policies()
        # The planner forces above force_ratio with disk.force on, and above refuse_writes_ratio
        # even with it off (writers are already turned away).
        forcing = any((p.disk.force and ratio > p.disk.force_ratio) or ratio > p.disk.refuse_writes_ratio
                      for p in policies)
        if any(ratio > p.disk.refuse_writes_ratio for p in policies):
            level = LEVEL_REFUSE
        elif forcing or any(ratio > p.disk.force_ratio for p in policies):
            level = LEVEL_FORCE
        elif any(ratio > p.disk.clean_ratio for p in policies):
            level = LEVEL_CLEAN
        else:
            level = LEVEL_OK
        now = time.monotonic()
        with self._measure_lock:
            previous_level = fs.level
            fs.used_ratio, fs.total_bytes, fs.free_bytes = ratio, usage.total_bytes, usage.free_bytes
            fs.level, fs.checked_at = level, time.time()
            if forcing and fs.force_since is None:
                fs.force_since = now
                logger.warning("disk {} is {:.1%} used, above force_ratio: passes run back to back "
                               "until it is below", fs.mountpoint, ratio)
            elif not forcing and fs.force_since is not None:
                logger.info("disk {} is back below force_ratio ({:.1%} used) after {:.2f}s",
                            fs.mountpoint, ratio, now - fs.force_since)
                fs.force_since = None
            elif level > previous_level and level == LEVEL_CLEAN:
                logger.info("disk {} is {:.1%} used, above clean_ratio: expired segments go at any hour",
                            fs.mountpoint, ratio)
            fs.forcing = forcing
        self.metrics.set_disk(fs.mountpoint, ratio, usage.free_bytes, level)
        self.history.disk(fs.mountpoint, ratio, fs.checked_at)
        self.metrics.set_thresholds(fs.mountpoint, {k: min(getattr(p.disk, k) for p in policies) for k in THRESHOLDS})
        return level, forcing

    def _request_pressure(self, dev: int) -> None:
        with self._state_lock:
            if dev in self._pressure_running or self._stopping.is_set():
                return
            self._pressure_running.add(dev)
        fs = self._filesystems.get(dev)
        job_id = f"pressure:{fs.mountpoint if fs else dev}"
        try:
            self._scheduler.add_job(self._pressure_job, args=(dev,), id=job_id, name=job_id,
                                    replace_existing=True, max_instances=1, misfire_grace_time=None)
        except Exception as exc:  # noqa: BLE001 (a scheduler shutting down)
            with self._state_lock:
                self._pressure_running.discard(dev)
            logger.debug("pressure pass not scheduled: {}", exc)

    def _pressure_job(self, dev: int) -> None:
        """Passes over every log on the filesystem, back to back while the disk forces.

        A writer that was refused resumes as soon as the disk is below force_ratio and may push it
        back above within milliseconds, so after a pass brings the disk below force_ratio the
        filesystem stays watched closely (a statvfs every `_HOT_POLL` seconds) for `_HOT_WINDOW`
        seconds: a new crossing in that time starts the next pass at once instead of at the next
        disk check."""
        try:
            while not self._stopping.is_set():
                result = self._run_pass(dev, kind="pressure")
                fs = self._filesystems.get(dev)
                if result is None or fs is None or result.interrupted:
                    return
                ended = time.monotonic()
                if result.deleted == 0:
                    return   # nothing deletable now (held, active, consumed-protected): the disk check asks again
                policies = fs.policies()
                pause = max(p.pause_between_files for p in policies)
                hot_until = ended + _HOT_WINDOW
                while True:
                    _, forcing = self._measure(fs)
                    if forcing:
                        break
                    if time.monotonic() >= hot_until or self._stopping.wait(_HOT_POLL):
                        return
                # Still pausing between deletions: the next pass starts `pause` after the last one.
                left = ended + pause - time.monotonic()
                if left > 0 and self._stopping.wait(left):
                    return
        finally:
            with self._state_lock:
                self._pressure_running.discard(dev)

    # ------------------------------------------------------------------ passes
    def _run_pass(self, dev: int, *, kind: str, policy: str | None = None,
                  only: set[str] | None = None) -> PassResult | None:
        """One pass over the logs of filesystem `dev` (those of `policy`, or all), under its lock."""
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
                result = fs.cleaner.run_pass(names=names)
            except Exception as exc:  # noqa: BLE001 (a pass that raises never stops the service)
                duration = time.monotonic() - started
                logger.opt(exception=exc).error("{} pass over {} raised: {}", kind, ", ".join(names), exc)
                self.metrics.observe_pass(kind, ERROR, duration)
                self.history.passed({"at": _iso(self._clock()), "kind": kind, "logs": names, "outcome": ERROR,
                                     "deleted": 0, "freed_bytes": 0, "duration_seconds": round(duration, 6),
                                     "error": str(exc)})
                self._note_error(names, kind, exc, duration)
                return None
            try:
                self._record(fs, result, kind)
            except Exception as exc:  # noqa: BLE001
                logger.opt(exception=exc).error("recording the {} pass failed: {}", kind, exc)
        if self._on_pass is not None:
            try:
                self._on_pass(kind, result)
            except Exception as exc:  # noqa: BLE001
                logger.opt(exception=exc).warning("on_pass callback raised: {}", exc)
        return result

    def _note_error(self, names: list[str], kind: str, exc: Exception, duration: float) -> None:
        at = self._clock()
        with self._state_lock:
            for name in names:
                previous = self._last_pass.get(name, {})
                self._last_pass[name] = {
                    "at": _iso(at), "finished_at": _iso(at), "kind": kind, "deleted": 0, "freed_bytes": 0,
                    "outcome": ERROR, "error": str(exc), "duration_seconds": round(duration, 6),
                    # a pass that raised is not a pass: health keeps counting from the last real one
                    "_end_mono": previous.get("_end_mono"),
                    "last_success_at": previous.get("last_success_at"),
                }

    def _record(self, fs: _Filesystem, result: PassResult, kind: str) -> None:
        end_wall = self._clock()
        end_mono = time.monotonic()
        outcomes = []
        for r in result.logs:
            watched = fs.cleaner.logs[r.name]
            state = _describe_log(watched, r)
            state["as_of"] = result.at.isoformat()
            outcome = _log_outcome(r, result.interrupted, state["exists"])
            outcomes.append(outcome)
            if r.plan is not None:
                for d in r.plan.decisions:
                    if r.actions.get(d.base_offset) == DELETED:
                        self.metrics.deleted(r.name, primary_trigger(d, r.plan.triggers), d.bytes)
            self.metrics.set_log(r.name, segments=state["segments"], bytes=state["bytes"],
                                 hung=len(state["hung"]), pinned_bytes=state["pinned_bytes"],
                                 hung_oldest_seconds=max((h["held_seconds"] for h in state["hung"]), default=0.0),
                                 hung_force_after=fs.config.policy_for(r.name).hung.force_after)
            self.metrics.set_lag(r.name, {g["group"]: (g["lag_bytes"], g["lag_records"])
                                          for g in state["consumer_groups"]})
            with self._state_lock:
                previous = self._last_pass.get(r.name, {})
                success = outcome in (OK, HUNG_OUTCOME)
                self._last_pass[r.name] = {
                    "at": result.at.isoformat(), "finished_at": _iso(end_wall), "kind": kind,
                    "deleted": r.deleted, "freed_bytes": r.deleted_bytes, "outcome": outcome,
                    "error": r.error or (next(iter(r.errors.values())) if r.errors else None),
                    "duration_seconds": round(result.duration, 6), "_end_mono": end_mono,
                    "last_success_at": _iso(end_wall) if success else previous.get("last_success_at"),
                }
                self._log_state[r.name] = state
                self._initial_passes.add(r.name)
                if not self._ready and set(self._config.logs) <= self._initial_passes:
                    self._ready = True
            if success:
                self.metrics.set_last_success(r.name, end_wall)
        outcome = _pass_outcome(outcomes)
        self.metrics.observe_pass(kind, outcome, result.duration)
        self.history.passed({"at": result.at.isoformat(), "kind": kind, "logs": [r.name for r in result.logs],
                             "outcome": outcome, "deleted": result.deleted, "freed_bytes": result.freed_bytes,
                             "duration_seconds": round(result.duration, 6)})
        logger.debug("{} pass over {}: {}, deleted {} ({} bytes) in {:.3f}s", kind,
                     ", ".join(r.name for r in result.logs), outcome, result.deleted,
                     result.freed_bytes, result.duration)

    # ------------------------------------------------------------------ on demand
    def clean(self, *, force: bool = False) -> PassResult:
        """A manual trigger: open `manual_passes` passes that ignore the hour window (and, with
        `force`, the reserve) for every policy, and run the first one now over every log. Returns
        that pass (one result across all filesystems). A manual pass covers every filesystem, so at
        most one runs at a time: a call while one runs raises `PassRunningError` naming it."""
        if not self._manual_lock.acquire(blocking=False):
            raise PassRunningError(self._describe_manual())
        try:
            self._manual_running = (time.monotonic(), force)
            filesystems = list(self._filesystems.values())
            for fs in filesystems:
                fs.cleaner.trigger_manual(force=force)
            logger.info("manual trigger{}: a pass runs now", " (force)" if force else "")
            results = [r for r in (self._run_pass(fs.dev, kind="manual") for fs in filesystems) if r is not None]
            return _merge(results, executed=True, clock=self._clock)
        finally:
            self._manual_running = None
            self._manual_lock.release()

    def _describe_manual(self) -> str:
        running = self._manual_running
        if running is None:   # it ended between the refusal and this line
            return "a manual pass was running; try again"
        started, force = running
        mounts = ", ".join(sorted(fs.mountpoint for fs in self._filesystems.values()))
        return (f"a manual{' (force)' if force else ''} pass over every log is running on {mounts} "
                f"(for {time.monotonic() - started:.1f}s); try again when it ends")

    def plan(self, *, manual: bool = False, force: bool = False) -> PassResult:
        """What a pass would do now, for every log (the object `retention plan --json` prints).
        Open manual triggers count; `manual`/`force` plan as if one were opened now."""
        config = self._config
        planner = Cleaner(config, clock=self._clock, audit=self._audit)
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
        if self._scheduler.state != STATE_RUNNING or self._stopping.is_set():
            return False
        every = self._desired_jobs(self._config)[_JOB_DISK][2]
        allowed = max(3 * every, 5.0)
        since = self._heartbeat if self._heartbeat is not None else self._started_mono
        return since is not None and time.monotonic() - since <= allowed

    def health(self) -> tuple[bool, list[str]]:
        """(healthy, problems): the scheduler is alive and every log had a pass no older than three
        of its intervals (counted from start for a log not passed yet)."""
        problems = []
        if not self.alive():
            problems.append("the scheduler is not running (or its disk check has stalled)")
        now = time.monotonic()
        config = self._config
        with self._state_lock:
            for name in config.logs:
                interval = config.policy_for(name).interval
                last = self._last_pass.get(name, {}).get("_end_mono") or self._log_since.get(name, now)
                if now - last > 3 * interval:
                    problems.append(f"log {name}: no completed pass for {now - last:.0f}s "
                                    f"(more than 3 intervals of {_g(interval)}s)")
        return not problems, problems

    @property
    def ready(self) -> bool:
        """Started, not stopping, and the first pass over every log (finishing interrupted
        removals) is done."""
        return self.running and (self._ready or not self._config.logs)

    def status(self) -> dict:
        """The `/status` object (see `retention/http.py`)."""
        config = self._config
        healthy, problems = self.health()
        filesystems = []
        by_log_fs: dict[str, _Filesystem] = {}
        for fs in self._filesystems.values():
            for n in fs.logs:
                by_log_fs[n] = fs
            filesystems.append({
                "mountpoint": fs.mountpoint, "logs": list(fs.logs),
                "used_ratio": fs.used_ratio, "total_bytes": fs.total_bytes, "free_bytes": fs.free_bytes,
                "pressure": LEVEL_NAMES[fs.level], "forcing": fs.forcing,
                "checked_at": _iso(fs.checked_at), "pressure_pass_running": fs.dev in self._pressure_running,
            })
        policies = {}
        for name in sorted({log.policy for log in config.logs.values()}):
            p = config.policies[name]
            policies[name] = {
                "interval_seconds": p.interval, "delete_at_hours": list(p.delete_at_hours),
                "timezone": p.timezone, "reserve_seconds": p.reserve, "files_per_pass": p.files_per_pass,
                "pause_between_files_seconds": p.pause_between_files,
                "disk_check_interval_seconds": p.disk_check_interval,
                "clean_ratio": p.disk.clean_ratio, "force_ratio": p.disk.force_ratio,
                "refuse_writes_ratio": p.disk.refuse_writes_ratio, "force": p.disk.force,
                "protect_unconsumed": p.protect_unconsumed,
                "hung_force_after_seconds": p.hung.force_after, "hung_retry_every_seconds": p.hung.retry_every,
                "logs": [n for n, log in config.logs.items() if log.policy == name],
            }
        manual = self._open_manual(config)
        logs = []
        with self._state_lock:
            for name, log in config.logs.items():
                fs = by_log_fs.get(name)
                state = dict(self._log_state.get(name) or _empty_state(os.path.isfile(os.path.join(str(log.path), "meta.json"))))
                last = self._last_pass.get(name)
                policy = config.policies[log.policy]
                trigger = manual.get(log.policy)
                logs.append({
                    "name": name, "path": str(log.path), "policy": log.policy,
                    "interval_seconds": policy.interval,
                    "disk": {"mountpoint": fs.mountpoint if fs else None,
                             "used_ratio": fs.used_ratio if fs else None,
                             "total_bytes": fs.total_bytes if fs else None,
                             "free_bytes": fs.free_bytes if fs else None,
                             "pressure": LEVEL_NAMES[fs.level] if fs else None},
                    **state,
                    "manual_passes_left": trigger.remaining if trigger else 0,
                    "last_pass": {k: v for k, v in last.items() if not k.startswith("_")} if last else None,
                })
        return {
            "service": "retention", "pid": os.getpid(),
            "healthy": healthy, "problems": problems, "ready": self.ready,
            "config_loaded_at": _iso(self.loaded_at),
            "uptime_seconds": round(time.monotonic() - self._started_mono, 3) if self._started_mono else 0.0,
            "interval_seconds": min((p["interval_seconds"] for p in policies.values()), default=None),
            "policies": policies, "filesystems": filesystems, "logs": logs, "jobs": self.jobs(),
            "audit": self._audit.path, "lag_note": LAG_NOTE,
        }

    def _on_job_event(self, event) -> None:
        kind = {EVENT_JOB_ERROR: "error", EVENT_JOB_MISSED: "missed",
                EVENT_JOB_MAX_INSTANCES: "skipped"}.get(event.code)
        if kind is None:
            return
        job = event.job_id
        if job.startswith("pressure:"):
            job = "pressure"
        self.metrics.job_event(job, kind)
        if kind == "error":   # APScheduler logs missed and skipped runs itself, at WARNING
            logger.opt(exception=getattr(event, "exception", None)).error(
                "scheduler job {} raised: {}", event.job_id, getattr(event, "exception", None))


# ---------------------------------------------------------------------- helpers
def _g(seconds: float) -> str:
    return f"{seconds:g}"


def _empty_state(exists: bool) -> dict:
    return {"exists": exists, "segments": None, "bytes": None, "start_offset": None, "end_offset": None,
            "triggers": [], "hung": [], "pinned": [], "pinned_bytes": 0, "consumer_groups": [],
            "stale_groups": [], "error": None, "as_of": None}


def _describe_log(watched, r: LogPassResult) -> dict:
    """What the pass saw of one log, for /status and the gauges (read under the filesystem lock)."""
    exists = watched.exists()
    state = _empty_state(exists)
    state["error"] = r.error
    state["pinned"] = [{"pid": p.pid, "command": p.command, "path": p.path, "bytes": p.bytes, "how": p.how}
                       for p in r.pinned]
    state["pinned_bytes"] = pinned_bytes(r.pinned)
    if r.plan is None:
        state["segments"], state["bytes"] = 0, 0
        return state
    plan = r.plan
    remaining = [d for d in plan.decisions if r.actions.get(d.base_offset) != DELETED]
    # A pass examines only the oldest segments it could delete and the active one; the segments in
    # between (`left_out`) are full, preallocated files between the last examined and the active.
    left_out = getattr(r, "left_out", 0) or 0
    segment_size = plan.decisions[0].bytes if plan.decisions else 0
    gap = (plan.decisions[-2].end_offset, plan.decisions[-1].base_offset) if left_out and len(plan.decisions) > 1 else None
    try:
        segment_size = watched.log.segment_size
    except Exception:  # noqa: BLE001
        pass
    state["segments"] = len(remaining) + left_out
    state["bytes"] = sum(d.bytes for d in remaining) + left_out * segment_size
    state["triggers"] = list(plan.triggers)
    state["stale_groups"] = list(plan.stale_groups)
    end = plan.decisions[-1].end_offset if plan.decisions else None
    state["end_offset"] = end
    try:
        log = watched.log
        start = log.start_offset
        committed = log.committed()
        times = log.commit_times()
        hung = watched.hung.snapshot()
    except Exception as exc:  # noqa: BLE001 (the status is best effort)
        state["error"] = state["error"] or str(exc)
        return state
    state["start_offset"] = start
    if end is None:
        end = start
        state["end_offset"] = end
    now = time.time()
    state["hung"] = [{"segment": f"{base:020d}.log", "base_offset": base,
                      "first_attempt_at": _iso(h.first_attempt_at), "last_attempt_at": _iso(h.last_attempt_at),
                      "held_seconds": round(now - h.first_attempt_at, 3)}
                     for base, h in sorted(hung.items())]
    groups = []
    for group, offset in sorted(committed.items()):
        lag_bytes = sum(d.bytes for d in remaining if d.end_offset > offset)
        if gap is not None:
            lag_bytes += _gap_segments(gap, left_out, offset) * segment_size
        groups.append({"group": group, "committed_offset": offset, "lag_records": max(0, end - offset),
                       "lag_bytes": lag_bytes, "last_commit_at": _iso(times.get(group)),
                       "stale": group in plan.stale_groups, "behind_start": offset < start})
    state["consumer_groups"] = groups
    return state


def _gap_segments(gap: tuple[int, int], count: int, committed: int) -> int:
    """Of `count` unexamined segments spanning offsets [gap), about how many hold offsets at or
    after `committed` (by offsets, as if the segments held equally many records)."""
    first, end = gap
    if committed <= first:
        return count
    if committed >= end or end <= first:
        return 0
    return math.ceil(count * (end - committed) / (end - first))


def _log_outcome(r: LogPassResult, interrupted: bool, exists: bool) -> str:
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


def _pass_outcome(outcomes: list[str]) -> str:
    for o in (FAILED_OUTCOME, INTERRUPTED, HUNG_OUTCOME):
        if o in outcomes:
            return o
    return OK


def _merge(results: list[PassResult], *, executed: bool, clock: Callable[[], float]) -> PassResult:
    if not results:
        return PassResult(datetime.fromtimestamp(clock(), timezone.utc), [], executed=executed)
    logs = [log for r in results for log in r.logs]
    return PassResult(results[0].at, logs, executed=executed, duration=sum(r.duration for r in results),
                      interrupted=any(r.interrupted for r in results))
