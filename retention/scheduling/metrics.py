"""Prometheus metrics of the retention scheduler, in a registry of its own.

Each `RetentionScheduler` owns one `RetentionMetrics`, so several schedulers (or an application's
own metrics) never collide in prometheus-client's global registry. `/metrics` serves
`exposition()`. Every metric is named `retention_*`; label values are log names, consumer group
names, policy names, mount points, job ids, triggers and outcomes, all bounded by the configuration.

Thread-safe (prometheus-client's metrics are).
"""

from __future__ import annotations

import threading
from enum import StrEnum
from types import MappingProxyType

from prometheus_client import (CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram,
                               ProcessCollector, generate_latest)

from .log_gauges import LogGauges


class PassOutcome(StrEnum):
    """How a pass ended (the `outcome` label, and `last_pass.outcome` in /status)."""

    OK = "ok"
    HUNG = "hung"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    ERROR = "error"
    OWNED_ELSEWHERE = "owned-elsewhere"


class PassKind(StrEnum):
    """What started a pass (the `kind` label)."""

    INTERVAL = "interval"
    PRESSURE = "pressure"
    HUNG_RETRY = "hung-retry"
    MANUAL = "manual"
    RESUMED = "resumed"


PASS_OUTCOME_DOCS = MappingProxyType({
    PassOutcome.OK: "Every planned deletion happened (or none was planned).",
    PassOutcome.HUNG: "A reader held a planned segment: kept, retried every hung.retry_every.",
    PassOutcome.FAILED: "A deletion failed, or the log could not be read (corrupt, unreadable).",
    PassOutcome.INTERRUPTED: "A stop or a reload ended the pass before all its planned deletions.",
    PassOutcome.ERROR: "The pass raised.",
    PassOutcome.OWNED_ELSEWHERE: "Another process owns the log's retention: left alone.",
})
"""Each pass outcome with what it means (the docs' table is generated from it)."""
PASS_KIND_DOCS = MappingProxyType({
    PassKind.INTERVAL: "The policy's interval.",
    PassKind.PRESSURE: "The disk check found the filesystem above a threshold.",
    PassKind.HUNG_RETRY: "A held segment's retry (hung.retry_every).",
    PassKind.MANUAL: "An operator's request (retention clean, POST /clean, POST /compact).",
    PassKind.RESUMED: "A pass a reload interrupted, resumed at once over the logs it had left.",
})
"""Each pass kind with what starts it."""

OK, HUNG_OUTCOME, FAILED_OUTCOME = PassOutcome.OK, PassOutcome.HUNG, PassOutcome.FAILED
INTERRUPTED, ERROR, OWNED_ELSEWHERE = PassOutcome.INTERRUPTED, PassOutcome.ERROR, PassOutcome.OWNED_ELSEWHERE
OUTCOMES = tuple(PassOutcome)
PASS_KINDS = tuple(PassKind)

# Thresholds exported per filesystem (retention_disk_<name>), in the order of the pressure levels.
THRESHOLDS = ("clean_ratio", "force_ratio", "refuse_writes_ratio")

_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class RetentionMetrics:
    """The metrics the sidecar exposes; methods are called by the scheduler after each pass."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, registry: CollectorRegistry | None = None, *, process: bool = True) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.logs = LogGauges()      # the gauges labelled by log: one row of figures a log (log_gauges)
        if process:
            ProcessCollector(registry=r)   # process_resident_memory_bytes, process_cpu_seconds_total
        self._add_disk_and_log_metrics(r)
        self._add_deletion_metrics(r)
        self._add_pass_metrics(r)
        self._add_service_metrics(r)
        self._lock = threading.Lock()
        self._budgets: dict[str, set[str]] = {}
        self._mounts: set[str] = set()
        self._policies: set[str] = set()

    def _add_disk_and_log_metrics(self, r: CollectorRegistry) -> None:
        """Each filesystem's use and thresholds; each log's size after a pass."""
        self.disk_used_ratio = Gauge(
            "retention_disk_used_ratio", "Used ratio of the filesystem holding logs, as df shows it (0-1).",
            ["mountpoint"], registry=r)
        self.disk_free_bytes = Gauge(
            "retention_disk_free_bytes", "Bytes available to unprivileged users on the filesystem.",
            ["mountpoint"], registry=r)
        self.disk_pressure = Gauge(
            "retention_disk_pressure_level",
            "0 below clean_ratio, 1 above clean_ratio, 2 above force_ratio (forcing), 3 above "
            "refuse_writes_ratio.", ["mountpoint"], registry=r)
        self.disk_thresholds = {
            name: Gauge(f"retention_disk_{name}", f"The {name} in force on the filesystem: the lowest of the "
                        "policies of its logs (0-1), so alerts and dashboards compare disk_used_ratio to it.",
                        ["mountpoint"], registry=r)
            for name in THRESHOLDS}
        logs = self.logs
        logs.register(r, "segments", "retention_log_segments", "Segment files of the log after the last pass.")
        logs.register(r, "bytes", "retention_log_bytes", "Bytes of the log's segment files after the last pass.")
        logs.register(r, "retention_bytes", "retention_log_retention_bytes", "The log's size cap (its policy's "
                      "retention_bytes); absent when it has none.")
        self.budget_bytes = Gauge(
            "retention_budget_bytes", "A shared byte budget's bytes (budgets.NAME.bytes).", ["budget"], registry=r)
        self.budget_used_bytes = Gauge(
            "retention_budget_used_bytes", "Bytes of the segment files of a budget's logs together, after "
            "the last pass of each; absent until each was seen.", ["budget"], registry=r)
        self.budget_share_bytes = Gauge(
            "retention_budget_share_bytes", "A log's share of its budget: bytes x weight / total weight, never "
            "below its floor.", ["budget", "log"], registry=r)
        logs.register(r, "dead_bytes", "retention_log_dead_bytes", "Record bytes of the log's sealed segments "
                      "that are dead (marked, not yet dropped by a compaction): used minus live bytes, after the "
                      "last pass.")

    def _add_deletion_metrics(self, r: CollectorRegistry) -> None:
        """What passes deleted, paced and found held or pinned."""
        self.deleted_segments = Counter(
            "retention_deleted_segments", "Segments deleted, by the trigger that allowed it.",
            ["log", "trigger"], registry=r)
        self.rolled_segments = Counter(
            "retention_rolled_segments", "Last segments a pass sealed short by roll_after (no writer had the "
            "log open).", ["log"], registry=r)
        self.deleted_bytes = Counter(
            "retention_deleted_bytes", "Bytes of deleted segments, by the trigger that allowed it.",
            ["log", "trigger"], registry=r)
        self.delete_pacing = Counter(
            "retention_delete_pacing_seconds", "Seconds passes waited to free the log's deleted bytes no "
            "faster than disk.delete_rate (pause_between_files not counted).", ["log"], registry=r)
        logs = self.logs
        logs.register(r, "hung", "retention_hung_segments", "Segments a delete attempt found held by a reader, "
                      "still kept.")
        logs.register(r, "pinned_bytes", "retention_pinned_bytes", "Bytes of deleted segment files some process "
                      "still holds open or mapped (the space is not free until it lets go).")
        logs.register(r, "hung_oldest", "retention_hung_oldest_seconds", "Seconds the longest-held hung segment "
                      "of the log has been held since the first delete attempt found it in use (0: none).")
        logs.register(r, "hung_force_after", "retention_hung_force_after_seconds", "The log's hung.force_after: "
                      "a segment held longer is deleted anyway at its next attempt.")

    def _add_pass_metrics(self, r: CollectorRegistry) -> None:
        """Passes, their durations, and consumer groups' lag."""
        self.pass_duration = Histogram(
            "retention_pass_duration_seconds", "Duration of cleanup passes, pauses included.",
            ["kind"], buckets=_DURATION_BUCKETS, registry=r)
        self.passes = Counter(
            "retention_passes", "Cleanup passes by what started them and how they ended "
            "(ok, hung, failed, interrupted, error = the pass raised).", ["kind", "outcome"], registry=r)
        self.logs.register_lag(r, 0, "retention_consumer_lag_bytes", "Approximate bytes a consumer group has "
                               "not consumed: the bytes of the segments at or after its committed offset.")
        self.logs.register_lag(r, 1, "retention_consumer_lag_records", "Records a consumer group has not consumed.")
        self.logs.register(r, "last_success", "retention_last_successful_pass_timestamp_seconds",
                           "Unix time of the end of the last pass that completed for the log without a failure.")

    def _add_service_metrics(self, r: CollectorRegistry) -> None:
        """The scheduler, reloads, health, the clock guard, HTTP and compaction."""
        self.job_events = Counter(
            "retention_scheduler_job_events", "Scheduler jobs that raised (error), ran too late to run "
            "at all (missed) or were skipped because the previous run was still going (skipped).",
            ["job", "event"], registry=r)
        self.reloads = Counter(
            "retention_config_reloads", "Configuration reloads (SIGHUP) by result (ok, error).",
            ["result"], registry=r)
        self.last_reload = Gauge(
            "retention_config_last_reload_success_timestamp_seconds",
            "Unix time the running configuration was loaded.", registry=r)
        self.last_reload_ok = Gauge(
            "retention_config_last_reload_successful", "1 when the last reload succeeded (or none was "
            "tried), 0 while an older configuration runs because it failed.", registry=r)
        self.last_reload_ok.set(1)
        self.health_problems = Gauge(
            "retention_health_problems", "Active health problems by kind (each makes /healthz 503 but a "
            "warning, reload-failed; docs/operations.md, \"Health\").", ["problem"], registry=r)
        self.clock_step = Gauge(
            "retention_clock_step_seconds", "How far the wall clock is ahead of the trusted time while a "
            "forward step waits for `retention clock accept` (0: no step held).", registry=r)
        self.interval = Gauge(
            "retention_policy_interval_seconds", "The policy's interval between cleanup passes.",
            ["policy"], registry=r)
        self.http_requests = Counter(
            "retention_http_requests", "HTTP requests answered, by endpoint (every unknown path counts "
            "as \"other\", so a scanner cannot add series) and status code.", ["path", "code"], registry=r)
        self.compaction_reclaimed = Counter(
            "retention_compaction_reclaimed_bytes", "Bytes of disk compaction gave back (its inputs' file "
            "bytes less its outputs').", ["log"], registry=r)
        self.compaction_bytes = Counter(
            "retention_compaction_bytes", "Bytes compaction read (its inputs' records) and wrote (its "
            "outputs), the figures its throttle counts.", ["log", "direction"], registry=r)
        self.compaction_duration = Histogram(
            "retention_compaction_duration_seconds", "Duration of compaction passes, throttle waits included.",
            buckets=_DURATION_BUCKETS, registry=r)

    # ------------------------------------------------------------------ updates
    def set_disk(self, mountpoint: str, used_ratio: float, free_bytes: int, level: int) -> None:
        with self._lock:
            self._mounts.add(mountpoint)
        self.disk_used_ratio.labels(mountpoint).set(used_ratio)
        self.disk_free_bytes.labels(mountpoint).set(free_bytes)
        self.disk_pressure.labels(mountpoint).set(level)

    def set_thresholds(self, mountpoint: str, ratios: dict[str, float]) -> None:
        """`ratios`: each name of `THRESHOLDS` -> the ratio in force on the filesystem."""
        for name, value in ratios.items():
            self.disk_thresholds[name].labels(mountpoint).set(value)

    def keep_mountpoints(self, mountpoints: set[str]) -> None:
        """Drop the series of filesystems no configured log lives on any more."""
        with self._lock:
            gone, self._mounts = self._mounts - mountpoints, self._mounts & mountpoints
        for m in gone:
            for g in (self.disk_used_ratio, self.disk_free_bytes, self.disk_pressure,
                      *self.disk_thresholds.values()):
                _remove(g, m)

    def set_log(self, log: str, *, segments: int, bytes: int, hung: int, pinned_bytes: int,
                hung_oldest_seconds: float = 0.0, hung_force_after: float | None = None,
                dead_bytes: int | None = None, retention_bytes: int | None = None) -> None:
        figures = {"retention_bytes": retention_bytes}     # None: a cap removed by a reload, absent
        if dead_bytes is not None:  # None: not known this pass (the log could not be read): kept
            figures["dead_bytes"] = dead_bytes
        if hung_force_after is not None:
            figures["hung_force_after"] = hung_force_after
        self.logs.set(log, segments=segments, bytes=bytes, hung=hung, pinned_bytes=pinned_bytes,
                      hung_oldest=hung_oldest_seconds, **figures)

    def set_budgets(self, budgets: dict[str, tuple[int, int | None, dict[str, int]]]) -> None:
        """`budgets`: name -> (bytes, used bytes or None, share by log); budgets absent now lose their series."""
        with self._lock:
            before, self._budgets = self._budgets, {name: set(shares) for name, (_, _, shares) in budgets.items()}
        for name, logs in before.items():
            for log in logs - self._budgets.get(name, set()):
                _remove(self.budget_share_bytes, name, log)
            if name not in budgets:
                _remove(self.budget_bytes, name)
                _remove(self.budget_used_bytes, name)
        for name, (nbytes, used, shares) in budgets.items():
            self.budget_bytes.labels(name).set(nbytes)
            if used is None:
                _remove(self.budget_used_bytes, name)
            else:
                self.budget_used_bytes.labels(name).set(used)
            for log, share in shares.items():
                self.budget_share_bytes.labels(name, log).set(share)

    def deleted(self, log: str, trigger: str, nbytes: int) -> None:
        self.deleted_segments.labels(log, trigger).inc()
        self.deleted_bytes.labels(log, trigger).inc(nbytes)

    def compacted(self, log: str, *, reclaimed: int, read: int, written: int) -> None:
        """Count one compaction output of `log`."""
        self.compaction_reclaimed.labels(log).inc(max(0, reclaimed))
        self.compaction_bytes.labels(log, "read").inc(read)
        self.compaction_bytes.labels(log, "written").inc(written)

    def compaction_pass(self, seconds: float) -> None:
        self.compaction_duration.observe(seconds)

    def observe_pass(self, kind: str, outcome: str, seconds: float) -> None:
        self.passes.labels(kind, outcome).inc()
        self.pass_duration.labels(kind).observe(seconds)

    def set_lag(self, log: str, lags: dict[str, tuple[int, int]]) -> None:
        """`lags`: group -> (bytes, records); groups absent now lose their series."""
        self.logs.set_lag(log, lags)

    def set_last_success(self, log: str, at: float) -> None:
        self.logs.set(log, last_success=at)

    def set_last_successes(self, logs: list[str], at: float) -> None:
        """`set_last_success` of each of `logs` (one taking of the rows' lock)."""
        self.logs.set_each(logs, "last_success", at)

    def job_event(self, job: str, event: str) -> None:
        self.job_events.labels(job, event).inc()

    def reload(self, result: str, at: float | None = None) -> None:
        self.reloads.labels(result).inc()
        self.last_reload_ok.set(1 if result == OK else 0)
        if result == OK and at is not None:
            self.last_reload.set(at)

    def set_policies(self, intervals: dict[str, float]) -> None:
        with self._lock:
            gone, self._policies = self._policies - set(intervals), set(intervals)
        for p in gone:
            _remove(self.interval, p)
        for p, seconds in intervals.items():
            self.interval.labels(p).set(seconds)

    def http_request(self, path: str, code: int) -> None:
        """Count one answered request; `path` must already be bounded (an endpoint or "other")."""
        self.http_requests.labels(path, str(code)).inc()

    def forget_log(self, log: str) -> None:
        """Drop the gauges of a log that is no longer configured (counters stay: they are history)."""
        self.logs.forget(log)

    # ------------------------------------------------------------------ exposition
    def exposition(self) -> bytes:
        """The registry in the Prometheus text format (`content_type`)."""
        return generate_latest(self.registry)


def _remove(metric, *labels: str) -> None:
    try:
        metric.remove(*labels)
    except KeyError:
        pass
