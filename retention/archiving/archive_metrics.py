"""Prometheus metrics of the archive tier's uploads, in the scheduler's registry (beside
`retention.scheduling.metrics`). Label values are log names, bounded by the configuration.
Thread-safe (prometheus-client's metrics are)."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge

__all__ = ["ArchiveMetrics"]


class ArchiveMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.lag_seconds = Gauge(
            "retention_archive_lag_seconds", "Seconds the log's oldest segment due for upload (sealed, past "
            "archive.upload_after) has waited without being archived; 0 when none waits.", ["log"], registry=r)
        self.lag_bytes = Gauge(
            "retention_archive_lag_bytes", "Bytes of the log's segments due for upload and not archived.",
            ["log"], registry=r)
        self.lag_unhealthy = Gauge(
            "retention_archive_lag_unhealthy_seconds", "The log's archive.lag_unhealthy: a lag above it is the "
            "health problem archive-lagging.", ["log"], registry=r)
        self.archived_bytes = Gauge(
            "retention_archive_bytes", "Bytes of the log's segments its archive manifest lists, as last read.",
            ["log"], registry=r)
        self.uploaded = Counter(
            "retention_archive_uploaded_segments", "Segments uploaded and listed in the log's manifest.",
            ["log"], registry=r)
        self.uploaded_bytes = Counter(
            "retention_archive_uploaded_bytes", "Bytes of the segments uploaded (data, not index).",
            ["log"], registry=r)
        self.failures = Gauge(
            "retention_archive_failures", "Upload runs of the log that failed in a row (0 after a good one).",
            ["log"], registry=r)

    def observe(self, log: str, state, uploaded: Sequence[int], lag_unhealthy: float) -> None:
        """After a run of `log`'s uploads: its `UploadState` and the bytes of each segment archived."""
        self.lag_seconds.labels(log).set(state.lag_seconds)
        self.lag_bytes.labels(log).set(state.lag_bytes)
        self.lag_unhealthy.labels(log).set(lag_unhealthy)
        self.archived_bytes.labels(log).set(state.archived_bytes)
        self.failures.labels(log).set(state.failures)
        self.uploaded.labels(log).inc(len(uploaded))
        self.uploaded_bytes.labels(log).inc(sum(uploaded))

    def forget(self, log: str) -> None:
        """Drop the gauges of a log that archives no more (counters stay: they are history)."""
        for gauge in (self.lag_seconds, self.lag_bytes, self.lag_unhealthy, self.archived_bytes, self.failures):
            try:
                gauge.remove(log)
            except KeyError:
                pass
