"""The scheduler's archive side: one `LogUploader` per log whose policy in force has an archive
`url`, each run by a job of its own (`archive:LOG` every `archive.interval`) on a thread pool of
its own, so a log whose tier hangs or fails stalls neither another log's uploads nor any
deletion pass.

Tiers are opened once per (url, endpoint, region) and shared by the logs archiving there (an S3
client is thread-safe). A reload keeps the uploader of a log whose settings did not change (its
backoff and figures with it) and replaces the others. The upload lag of every log is exported
(`retention_archive_lag_seconds`, `_bytes`) and a lag above the log's `archive.lag_unhealthy`
is a health problem (`archive-lagging`, `retention.scheduling.problems`).

Thread-safe: `sync` and the readers take the archiver's lock; each uploader is run by its one job.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from loguru import logger

from commitlog import ArchiveError
from commitlog.archive import Tier, open_tier
from policies import RetentionConfig

from ..audit import AuditTrail, audit_time
from .archive_metrics import ArchiveMetrics
from .uploader import LogUploader

__all__ = ["ARCHIVE_PREFIX", "Archiver"]

ARCHIVE_PREFIX = "archive:"


class Archiver:
    """Every log's uploads (see the module docstring)."""

    def __init__(self, metrics: ArchiveMetrics, *, clock: Callable[[], float] = time.time,
                 stopping: threading.Event | None = None, tier_factory: Callable[..., Tier] = open_tier,
                 expiry_clock: Callable[[], float] | None = None,
                 on_listed: Callable[[str], None] = lambda name: None) -> None:
        self.metrics = metrics
        self._on_listed = on_listed        # `on_listed(log)` once its manifest lists more segments
        self._clock = clock
        self._expiry_clock = expiry_clock     # total retention's time: the trusted now after a clock step
        self._stopping = stopping or threading.Event()
        self._open_tier = tier_factory
        self._lock = threading.Lock()
        self._uploaders: dict[str, LogUploader] = {}
        self._settings: dict[str, tuple] = {}
        self._tiers: dict[tuple, Tier] = {}

    def sync(self, config: RetentionConfig, audit: AuditTrail) -> dict[str, float]:
        """Make the uploaders those `config` asks for; returns each log's job id -> interval (s).
        A tier that cannot be opened (boto3 missing, say) fails that log's runs, not the sync."""
        wanted = {name: config.policy_for(name) for name in config.logs}
        wanted = {name: policy for name, policy in wanted.items() if policy.archive.enabled}
        retired = []
        with self._lock:
            for name in list(self._uploaders):
                settings = (config.logs.get(name), wanted.get(name), audit.path)
                if name not in wanted or self._settings[name] != settings:
                    retired.append(self._uploaders.pop(name))
                    del self._settings[name]
                    if name not in wanted:
                        self.metrics.forget(name)
            for name, policy in wanted.items():
                if name in self._uploaders:
                    continue
                tier = self._tier(policy.archive)
                self._uploaders[name] = LogUploader(name, config.logs[name], policy, tier, audit,
                                                    clock=self._clock, stopping=self._stopping,
                                                    expiry_clock=self._expiry_clock,
                                                    on_listed=lambda name=name: self._on_listed(name))
                self._settings[name] = (config.logs[name], policy, audit.path)
        for uploader in retired:
            uploader.close()
        return {ARCHIVE_PREFIX + name: policy.archive.interval for name, policy in wanted.items()}

    def _tier(self, archive) -> Tier:
        key = (archive.url, archive.endpoint, archive.region)
        tier = self._tiers.get(key)
        if tier is None:
            try:
                tier = self._tiers[key] = self._open_tier(archive.url, endpoint=archive.endpoint,
                                                          region=archive.region)
            except Exception as exc:     # noqa: BLE001 - reported by the log's runs, not the reload
                logger.error("archive {}: cannot be opened: {}", archive.url, exc)
                tier = _Unopened(archive.url, exc)       # not kept: a reload opens it again
        return tier

    def upload(self, name: str) -> int:
        """The job of log `name`: one upload run; returns how many segments it archived."""
        with self._lock:
            uploader = self._uploaders.get(name)
        if uploader is None or self._stopping.is_set():
            return 0
        done = uploader.run()
        self.metrics.observe(name, uploader.state, [info.used_bytes for info in done],
                             uploader.settings.lag_unhealthy)
        return len(done)

    def uploaders(self) -> dict[str, LogUploader]:
        """By log name, sorted: the uploaders (the CLI's `archive` commands run them one by one)."""
        with self._lock:
            return dict(sorted(self._uploaders.items()))

    def problems(self) -> list[tuple[str, str]]:
        """(log, message) of every log whose upload lag, measured now (a run that hangs does not
        hide it), is above its `archive.lag_unhealthy`; the lag gauges follow."""
        out = []
        now = self._clock()
        with self._lock:
            uploaders = list(self._uploaders.items())
        for name, uploader in uploaders:
            state, limit = uploader.state, uploader.settings.lag_unhealthy
            lag = state.lag_at(now)
            self.metrics.lag_seconds.labels(name).set(lag)
            if lag > limit:
                why = f": {state.last_error}" if state.last_error else ""
                out.append((name, f"the oldest segment due for upload to {uploader.archive.tier.url} has waited "
                                  f"{lag:.0f}s (lag_unhealthy {limit:g}s), {state.lag_bytes} bytes "
                                  f"waiting{why}"))
        return out

    def missing(self) -> list[tuple[str, str]]:
        """(log, message) of every log whose tier is not trusted (`commitlog.archive.identity`):
        it cannot prove it is the log's, lost its manifest, or lacks listed objects. Its uploads
        and evictions wait meanwhile."""
        with self._lock:
            uploaders = list(self._uploaders.items())
        return [(name, f"the archive {u.archive.tier.url}: {u.state.missing}") for name, u in uploaders
                if u.state.missing]

    def kick(self, names: list[str]) -> list[str]:
        """Of `names`, the logs with an uploader whose tier is not in a failure's backoff (a disk
        force asks them to upload at once: `retention.scheduling.pressure_watch`)."""
        now = self._clock()
        with self._lock:
            return [n for n in names if n in self._uploaders and self._uploaders[n].state.next_try_at <= now]

    def status(self) -> dict[str, dict]:
        """By log: its tier and the figures of its uploads (the `archive` object of /status)."""
        with self._lock:
            uploaders = list(self._uploaders.items())
        now = self._clock()
        return {name: {"url": u.archive.tier.url, **_state_json(u.state, now)} for name, u in sorted(uploaders)}

    def close(self) -> None:
        with self._lock:
            uploaders, self._uploaders, self._settings = list(self._uploaders.values()), {}, {}
        for uploader in uploaders:
            uploader.close()


def _state_json(state, now: float) -> dict:
    return {"lag_seconds": round(state.lag_at(now), 3), "lag_bytes": state.lag_bytes, "missing": state.missing,
            "archived_segments": state.archived_segments, "archived_bytes": state.archived_bytes,
            "failures": state.failures, "last_error": state.last_error,
            "last_success_at": None if state.last_success_at is None else audit_time(state.last_success_at),
            "owned_elsewhere": state.owned_elsewhere}


class _Unopened:
    """A tier that could not be opened (boto3 missing, say): every operation fails as opening it
    did, so the log's runs report it (last_error, the lag, archive-lagging) until a reload."""

    def __init__(self, url: str, exc: Exception) -> None:
        self.url = url
        self._exc = exc

    def _fail(self, *_: object, **__: object):
        raise ArchiveError(self.url, None, f"cannot be opened: {self._exc}")

    put = read_range = read = head = size = delete = keys = _fail
