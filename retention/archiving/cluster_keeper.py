"""The sidecar's work on its cluster logs' tiers (docs/spark-cluster.md, "Retention on the tier"):
a job `cluster:LOG` every `archive.cluster.interval` for each configured log with an archive tier.
A run does nothing unless the tier holds `<log>/cluster.json`; then it reads the log's lease
(`commitlog.archive.lease`) and renews or takes it as `policies.tier_lease` decides; the owner
then runs total retention (`retention.archiving.cluster_retention`) and the collector
(`retention.archiving.staged_collector`). A sidecar that does not own the lease says who does
(`status()`: owner host, pid, until when), which is no health problem; a lease it cannot read or
renew is one (`problems()`: `cluster-lease-failing`).

Decisions use `judged()` (the clock guard's trusted time: a forward step does not expire a lease
or a claim early); the lease's times are written in it. Thread-safe: `sync` and the readers take
the keeper's lock; each log's runs are one at a time (its job is `max_instances=1`).
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace

from loguru import logger

from commitlog.archive import Tier, open_tier, versions
from commitlog.archive.lease import LeaseTerm, create_term, newest_term
from commitlog.errors import ArchiveError
from policies import (LEASE_RENEW, LEASE_TAKE, CollectorLimits, PolicyConfig, RetentionConfig, lease_decision,
                      owns_lease)

from ..audit import AuditTrail, audit_time
from .cluster_retention import drop_expired
from .staged_collector import StagedCollector

__all__ = ["CLUSTER_PREFIX", "ClusterKeeper", "ClusterState", "acquire"]

CLUSTER_PREFIX = "cluster:"


@dataclass(frozen=True)
class ClusterState:
    """What one log's tier job last saw (the `cluster` object of /status)."""

    cluster: bool = False
    owner: str | None = None              # the newest term's holder: "host pid N"
    until: float | None = None            # its expiry (epoch seconds)
    mine: bool = False
    lease_error: str | None = None        # the lease could not be read or renewed
    last_error: str | None = None         # the owner's retention or collector failed
    last_run_at: float | None = None
    dropped_segments: int = 0
    deleted_objects: int = 0
    deleted_bytes: int = 0


def acquire(tier: Tier, log: str, me: str, *, now_ms: int, lease_ms: int) -> LeaseTerm | None:
    """Read log `log`'s lease on `tier`; renew or take it for `me` when `policies.tier_lease` says
    so; the newest term after that (None: no term at all, as after losing a first term's race to
    a process that pruned it)."""
    newest = newest_term(tier, log)
    seen = None if newest is None else (newest.term, newest.owner, newest.expires_at_ms)
    decision = lease_decision(seen, me, now_ms=now_ms, lease_ms=lease_ms)
    if decision.action not in (LEASE_RENEW, LEASE_TAKE):
        return newest
    made = LeaseTerm(decision.term, me, socket.gethostname(), os.getpid(), now_ms, decision.expires_at_ms)
    created = create_term(tier, log, made)
    newest = newest_term(tier, log)     # a term pruned while this process stalled is no lease: read back
    if created and newest is not None and newest.term == made.term and decision.action == LEASE_TAKE:
        logger.info("{}: took the lease on {} (term {}, until {})", log, tier.url, made.term,
                    audit_time(made.expires_at_ms / 1000))
    return newest


class ClusterKeeper:
    """Every cluster log's tier work of one sidecar (see the module docstring)."""

    def __init__(self, *, judged: Callable[[], float] = time.time, clock: Callable[[], float] = time.time,
                 stopping: threading.Event | None = None, tier_factory: Callable[..., Tier] = open_tier) -> None:
        self._judged, self._clock = judged, clock
        self._stopping = stopping or threading.Event()
        self._open_tier = tier_factory
        self._lock = threading.Lock()
        self.me = f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:12]}"
        self._logs: dict[str, tuple] = {}         # name -> (settings, policy, tier, collector)
        self._states: dict[str, ClusterState] = {}

    def sync(self, config: RetentionConfig, audit: AuditTrail) -> dict[str, float]:
        """Follow `config`: job id -> interval (seconds) of each log with an archive tier."""
        wanted = {n: config.policy_for(n) for n in config.logs}
        wanted = {n: p for n, p in wanted.items() if p.archive.enabled}
        with self._lock:
            for name in list(self._logs):
                if name not in wanted or self._logs[name][0] != (config.logs[name], wanted[name], audit.path):
                    del self._logs[name]
                    self._states.pop(name, None)
            for name, policy in wanted.items():
                if name in self._logs:
                    continue
                try:
                    tier = self._open_tier(policy.archive.url, endpoint=policy.archive.endpoint,
                                           region=policy.archive.region)
                except Exception as exc:     # noqa: BLE001 - the uploads report it (archive-lagging)
                    logger.debug("cluster tier of {}: cannot be opened: {}", name, exc)
                    continue
                tier_name = os.path.basename(os.path.normpath(str(config.logs[name].path)))
                collector = StagedCollector(tier, tier_name, audit, clock=self._clock)
                self._logs[name] = ((config.logs[name], policy, audit.path), policy, tier, collector)
        return {CLUSTER_PREFIX + n: p.archive.cluster.interval for n, p in wanted.items()}

    def run(self, name: str) -> None:
        """The job of log `name`: the lease, then (its owner) retention and the collector."""
        with self._lock:
            entry = self._logs.get(name)
        if entry is None or self._stopping.is_set():
            return
        _, policy, tier, collector = entry
        state = self._states.get(name, ClusterState())
        try:
            if not versions.is_cluster(tier, collector.name):
                self._states[name] = ClusterState()
                return
            held = self._lease(tier, collector.name, policy)
            if held is None:
                raise ArchiveError(tier.url, f"{collector.name}/lease/", "no lease term after creating one")
        except ArchiveError as exc:
            self._states[name] = replace(state, cluster=True, mine=False, lease_error=str(exc))
            logger.warning("{}: the lease on {} cannot be read or renewed: {}", name, tier.url, exc)
            return
        state = replace(state, cluster=True, lease_error=None, owner=f"{held.host} pid {held.pid}",
                        until=held.expires_at_ms / 1000, mine=held.owner == self.me, last_run_at=self._clock())
        self._states[name] = state
        if state.mine:
            self._states[name] = self._own(name, state, tier, collector, policy, held)

    def _lease(self, tier: Tier, log: str, policy: PolicyConfig) -> LeaseTerm:
        held = acquire(tier, log, self.me, now_ms=int(self._judged() * 1000),
                       lease_ms=int(policy.archive.cluster.lease * 1000))
        return held

    def _own(self, name: str, state: ClusterState, tier: Tier, collector: StagedCollector, policy: PolicyConfig,
             held: LeaseTerm) -> ClusterState:
        def owned() -> bool:
            seen = (held.term, held.owner, held.expires_at_ms)
            return not self._stopping.is_set() and owns_lease(seen, self.me, now_ms=int(self._judged() * 1000))

        try:
            dropped = drop_expired(tier, collector.name, policy, now=self._judged()) if owned() else None
            if dropped is not None:
                for segment, why in dropped.segments:
                    collector.dropped.update({segment.data_file: why, segment.index_file: why})
                state = replace(state, dropped_segments=state.dropped_segments + len(dropped.segments))
            c = policy.archive.cluster
            done = collector.run(CollectorLimits(c.grace, c.claim_grace, c.staged_max_age), now=self._judged(),
                                 owned=owned)
        except (ArchiveError, OSError) as exc:
            logger.warning("{}: retention on the tier {} failed: {}", name, tier.url, exc)
            return replace(state, last_error=str(exc))
        return replace(state, last_error=None, deleted_objects=state.deleted_objects + done.objects,
                       deleted_bytes=state.deleted_bytes + done.bytes)

    def problems(self) -> list[tuple[str, str]]:
        """(log, message) of every cluster log whose lease could not be read or renewed."""
        with self._lock:
            names = set(self._logs)
        return [(n, f"the lease on its archive tier cannot be read or renewed: {s.lease_error}")
                for n, s in sorted(self._states.items()) if n in names and s.lease_error]

    def status(self) -> dict[str, dict]:
        """By cluster log: the lease's owner and until when, whether it is this sidecar, figures."""
        with self._lock:
            names = set(self._logs)
        return {n: {"owner": s.owner, "until": None if s.until is None else audit_time(s.until), "mine": s.mine,
                    "lease_error": s.lease_error, "last_error": s.last_error,
                    "last_run_at": None if s.last_run_at is None else audit_time(s.last_run_at),
                    "dropped_segments": s.dropped_segments, "deleted_objects": s.deleted_objects,
                    "deleted_bytes": s.deleted_bytes}
                for n, s in sorted(self._states.items()) if n in names and s.cluster}
