"""Jobs: the scheduler's APScheduler wiring (3.x `BackgroundScheduler`, UTC inside).

Every interval job is `max_instances=1`, `coalesce=True`, with a `misfire_grace_time` of at least its
own interval (a one-off job, `add_once`, has no instance cap). `sync_jobs` makes the running
scheduler hold exactly the desired jobs: on a reload, jobs are rescheduled (new intervals), added
or removed (policies); one-off pressure jobs are left alone.
Wall clock steps: `StepSafeInterval` skips a forward step's missed runs at once, and
`StepSafeScheduler` wakes at least every second and brings back to now an interval job a clock set
back left scheduled far ahead.

The jobs (`cleanup:POLICY`, `hung:POLICY`, `disk-check`, `archive:LOG`, `cluster:LOG`,
`compact:POLICY`; the roll watch beside them), what each does and how often: docs, Operations,
"What the sidecar does, and when".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime, timezone
from typing import NamedTuple

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger
from loguru import logger

from policies import RetentionConfig

from .metrics import RetentionMetrics

__all__ = ["DEFAULT_POOL", "JOB_DISK", "PRESSURE_PREFIX", "JobSpec", "add_once", "cleanup_job", "describe_jobs", "desired_jobs", "disk_check_every",
           "list_jobs", "new_scheduler", "seconds", "sync_jobs"]

DEFAULT_POOL = 16          # threads are created lazily, only as jobs run concurrently
ARCHIVE_POOL = 8           # uploads of this many logs run at once; more wait their turn
JOB_DISK = "disk-check"
PRESSURE_PREFIX = "pressure:"


class StepSafeInterval(IntervalTrigger):
    """An interval trigger that, far behind `now` (the wall clock stepped forward), gives the next
    fire time after `now` at once. APScheduler lists every missed run time one interval at a time
    before coalescing them: a year's step of a 1 s job is 31.5 million of them, and the scheduler's
    thread stalled on them for minutes, disk checks included."""

    def get_next_fire_time(self, previous_fire_time, now):
        if previous_fire_time is not None and (now - previous_fire_time).total_seconds() > 2 * self.interval_length:
            previous_fire_time = None          # from the start date: the first fire time at or after now
        return super().get_next_fire_time(previous_fire_time, now)


_WAKE_EVERY = 1.0          # most seconds the scheduler's thread sleeps: a clock set back is seen by then


class StepSafeScheduler(BackgroundScheduler):
    """A BackgroundScheduler a wall clock set back does not put to sleep. APScheduler sleeps until
    the next run time: after a clock returned from a year ahead that was a year, every pass and
    disk check stopped. Its thread wakes at least every `_WAKE_EVERY` seconds, and an interval job
    whose next run is more than two intervals ahead of now is brought back to now."""

    def _process_jobs(self):
        now = datetime.now(self.timezone)
        for job in self.get_jobs():
            trigger = job.trigger
            if (isinstance(trigger, IntervalTrigger) and job.next_run_time is not None
                    and (job.next_run_time - now).total_seconds() > 2 * trigger.interval_length):
                job.modify(next_run_time=now)
        wait = super()._process_jobs()
        return _WAKE_EVERY if wait is None else min(wait, _WAKE_EVERY)


class JobSpec(NamedTuple):
    func: Callable
    args: tuple
    every: float
    executor: str


def seconds(value: float | None) -> str:
    """An interval for a log line; a one-shot job (a pressure pass) has none."""
    return "?" if value is None else f"{value:g}"


def describe_jobs(jobs: list[dict]) -> str:
    """`id every Ns` per interval job, `id once` per one-shot job (the start-up line)."""
    return ", ".join(f"{j['id']} once" if j["interval_seconds"] is None
                     else f"{j['id']} every {seconds(j['interval_seconds'])}s" for j in jobs)


def new_scheduler(max_workers: int, metrics: RetentionMetrics) -> BackgroundScheduler:
    """A scheduler with a pool for passes and one thread for the disk check (never behind a pass);
    job errors, missed and skipped runs are counted in `metrics` and errors logged."""
    scheduler = StepSafeScheduler(
        timezone=timezone.utc,
        executors={"default": ThreadPoolExecutor(max_workers), "disk": ThreadPoolExecutor(1),
                   "archive": ThreadPoolExecutor(ARCHIVE_POOL)},
        job_defaults={"max_instances": 1, "coalesce": True})

    def on_event(event) -> None:
        kind = {EVENT_JOB_ERROR: "error", EVENT_JOB_MISSED: "missed",
                EVENT_JOB_MAX_INSTANCES: "skipped"}.get(event.code)
        if kind is None:
            return
        job = "pressure" if event.job_id.startswith(PRESSURE_PREFIX) else event.job_id
        metrics.job_event(job, kind)
        if kind == "error":   # APScheduler logs missed and skipped runs itself, at WARNING
            logger.opt(exception=getattr(event, "exception", None)).error(
                "scheduler job {} raised: {}", event.job_id, getattr(event, "exception", None))

    scheduler.add_listener(on_event, EVENT_JOB_ERROR | EVENT_JOB_MISSED | EVENT_JOB_MAX_INSTANCES)
    return scheduler


def cleanup_job(policy: str) -> str:
    """The id of the job running the passes of `policy` (`cleanup:POLICY`)."""
    return f"cleanup:{policy}"


def desired_jobs(config: RetentionConfig, *, cleanup: Callable[[str], None], hung: Callable[[str], None],
                 disk_check: Callable[[], None], compact: Callable[[str], None] | None = None,
                 upload: Callable[[str], object] | None = None,
                 uploads: dict[str, float] | None = None) -> dict[str, JobSpec]:
    """`cleanup:POLICY` every interval, `hung:POLICY` every hung.retry_every for each policy in use,
    `compact:POLICY` every compaction.interval for those with compaction enabled (when `compact` is
    given), `disk-check` every smallest disk_check_interval of them, and `upload(LOG)` as each job
    of `uploads` (`archive:LOG` -> seconds) asks. A `discover` root's policy is in use with no log
    found yet: its interval pass is what reads the root again."""
    used = sorted({log.policy for log in config.logs.values()} | {entry.policy for entry in config.discover})
    jobs: dict[str, JobSpec] = {}
    for p in used:
        policy = config.policies[p]
        jobs[cleanup_job(p)] = JobSpec(cleanup, (p,), policy.interval, "default")
        jobs[f"hung:{p}"] = JobSpec(hung, (p,), policy.hung.retry_every, "default")
        # A log's overrides may turn compaction on under a policy that has it off.
        if compact is not None and any(config.policy_for(n).compaction.enabled
                                       for n, log in config.logs.items() if log.policy == p):
            jobs[f"compact:{p}"] = JobSpec(compact, (p,), policy.compaction.interval, "default")
    jobs[JOB_DISK] = JobSpec(disk_check, (), disk_check_every(config), "disk")
    for job_id, every in (uploads or {}).items():
        jobs[job_id] = JobSpec(upload, (job_id.split(":", 1)[1],), every, "archive")
    return jobs


def disk_check_every(config: RetentionConfig) -> float:
    """Seconds between two disk checks: the smallest disk_check_interval of the policies in use."""
    used = {log.policy for log in config.logs.values()}
    return min((config.policies[p].disk_check_interval for p in used), default=1.0)


def sync_jobs(scheduler: BackgroundScheduler, desired: dict[str, JobSpec], *, first: bool) -> None:
    """Add, reschedule and remove jobs so `scheduler` runs `desired`; cleanup and disk-check jobs
    added run at once."""
    existing = {job.id: job for job in scheduler.get_jobs()}
    now = datetime.now(timezone.utc)
    for job_id, (func, args, every, executor) in desired.items():
        grace = max(1, math.ceil(every))      # at least one interval late is still run
        trigger = StepSafeInterval(seconds=every, timezone=timezone.utc)
        job = existing.get(job_id)
        if job is None:
            immediately = job_id.startswith(("cleanup:", "archive:", "cluster:")) or job_id == JOB_DISK
            extra = {"next_run_time": now} if immediately else {}
            scheduler.add_job(func, trigger, args=args, id=job_id, name=job_id, executor=executor,
                              max_instances=1, coalesce=True, misfire_grace_time=grace, **extra)
            if not first:
                logger.info("reload: added job {} every {}s", job_id, seconds(every))
        else:
            current = job.trigger.interval.total_seconds() if isinstance(job.trigger, IntervalTrigger) else None
            if current is None or abs(current - every) > 1e-6:
                scheduler.reschedule_job(job_id, trigger=trigger)
                logger.info("reload: job {} now every {}s (was {}s)", job_id, seconds(every),
                            seconds(current or 0))
            if job.misfire_grace_time != grace:
                scheduler.modify_job(job_id, misfire_grace_time=grace)
    for job_id in existing:
        if job_id not in desired and not job_id.startswith(PRESSURE_PREFIX):
            scheduler.remove_job(job_id)
            logger.info("reload: removed job {}", job_id)


def run_now(scheduler: BackgroundScheduler, job_id: str) -> None:
    """Bring job `job_id`'s next run to now (none when it is gone; one running is not doubled)."""
    try:
        scheduler.modify_job(job_id, next_run_time=datetime.now(timezone.utc))
    except JobLookupError:
        pass


ONCE_INSTANCES = 1 << 20   # no cap on a one-off job's instances (see `add_once`)


def add_once(scheduler: BackgroundScheduler, func: Callable, args: tuple, job_id: str) -> None:
    """Run `func(*args)` once, now, on the pass pool (replacing a finished job of the same id).

    Its caller keeps it one at a time (the pressure watch's `running`; passes serialise on their
    filesystem's lock), not APScheduler: an instance counts as ended only once its thread is back
    from the function, so with `max_instances=1` a job added again in that gap (a disk check's
    request just after a pressure job let go of `running`) was skipped and dropped for good."""
    scheduler.add_job(func, args=args, id=job_id, name=job_id, replace_existing=True,
                      max_instances=ONCE_INSTANCES, misfire_grace_time=None)


def list_jobs(scheduler: BackgroundScheduler) -> list[dict]:
    """The scheduled jobs: id, interval in seconds, next run time (ISO 8601, UTC)."""
    out = []
    for job in scheduler.get_jobs():
        interval = job.trigger.interval.total_seconds() if isinstance(job.trigger, IntervalTrigger) else None
        nxt = getattr(job, "next_run_time", None)
        out.append({"id": job.id, "interval_seconds": interval,
                    "next_run_time": nxt.isoformat() if nxt else None,
                    "misfire_grace_time": job.misfire_grace_time})
    return sorted(out, key=lambda j: j["id"])
