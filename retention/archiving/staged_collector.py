"""The collector of a cluster log's tier, run by the lease owner: staged objects no kept manifest
version lists, once dead (`policies.staged_collection`: an aborted job's, a committed job's
unlisted attempt's, a job past its claim's deadline, an unclaimed job's after `staged_max_age`,
and the segments total retention dropped), superseded versions that alone still list dropped
objects, and a finished job's markers. Each object is deleted under an `archive-delete` audit
intent (fsynced) and its `deleted` outcome (`log`, `path` the object's URL, `segment` its key
under the log's folder, `bytes`, `archive`, `because`); an intent whose process died is settled
by deleting the object again (it was dead) with `"recovered": true`.

An unclaimed job is fenced before its objects go: the collector creates the job's claim with a
deadline already past (`Tier.create`), so a driver that wakes up cannot commit it; a driver that
claimed first keeps its job under the claim rules.

The times an object or a version was first seen are the owner's memory: a new owner starts them
again (it waits longer, never less). Not thread-safe: one run at a time per log.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from loguru import logger

from commitlog.archive import Manifest, Tier, versions
from commitlog.archive.job_claims import ABORTED as ABORTED_MARKER
from commitlog.archive.job_claims import COMMITTING, JOBS, STAGED, claim_body, claim_deadline, job_key
from commitlog.errors import ArchiveError
from policies import JOB_ABORTED, JOB_DONE, UNCLAIMED, CollectorLimits, JobState, dead_reason, markers_left_over, prunable_versions

from ..audit import (AbortedEntry, AbortReason, ArchiveDeletionEntry, AuditTrail, Event, IntentAction,
                     RecoveredArchiveDeletionEntry)
from .expiry import ARCHIVE_DELETE

__all__ = ["Collected", "StagedCollector"]

FENCE_BY = "retention collector"


@dataclass
class Collected:
    """One run's figures."""

    objects: int = 0
    bytes: int = 0
    versions: int = 0
    markers: int = 0


class StagedCollector:
    """The collector of one cluster log `name` on `tier` (see the module docstring)."""

    def __init__(self, tier: Tier, name: str, audit: AuditTrail, *, clock: Callable[[], float]) -> None:
        self.tier, self.name, self.audit = tier, name, audit
        self._clock = clock                     # the audit lines' time
        self._unlisted_since: dict[str, float] = {}
        self._version_seen: dict[int, float] = {}
        self._manifests: dict[int, Manifest] = {}   # versions are immutable: read once
        self.dropped: dict[str, str] = {}       # key under the folder -> total retention's reason

    def run(self, limits: CollectorLimits, *, now: float, owned: Callable[[], bool]) -> Collected:
        """One pass at `now` (the trusted time); `owned()` is asked before each deletion."""
        done = Collected()
        self._settle()
        jobs = self._job_markers()              # before the versions: a claim seen absent came later
        listed_versions, kept = self._kept_versions(now)
        newest = kept[listed_versions[-1]] if listed_versions else Manifest(self.name)   # no commit yet
        in_newest = _keys(newest)
        holding = {v for v in listed_versions[:-1] if _keys(kept[v]) - in_newest}
        for version in prunable_versions(listed_versions, holding, self._version_seen, now=now, grace=limits.grace):
            if not owned():
                return done
            self.tier.delete(versions.version_key(self.name, version))
            del kept[version]
            done.versions += 1
        listed = set().union(*(_keys(m) for m in kept.values()))
        staged = self._staged()
        for key in staged:
            if key in in_newest:
                self._unlisted_since.pop(key, None)
            else:
                self._unlisted_since.setdefault(key, now)
        for stale in set(self._unlisted_since) - set(staged):
            del self._unlisted_since[stale]
        remaining = set(staged)
        for job, keys in sorted(_by_job(staged).items()):
            state = _state(jobs.get(job, {}), job in newest.jobs)
            dead = [(key, dead_reason(listed=key in listed, unlisted_since=self._unlisted_since.get(key, now),
                                      dropped=self.dropped.get(key), job=state, now=now, limits=limits))
                    for key in keys]
            dead = [(key, why) for key, why in dead if why is not None]
            if not dead or not owned():
                continue
            # An unclaimed job's objects go only once no driver can commit it (see dead_reason).
            fence = not state.claimed and any(why in (UNCLAIMED, JOB_ABORTED) for _, why in dead)
            if fence and not self._fence(job, jobs):
                continue
            for key, why in dead:
                done.bytes += self._delete(key, why)
                done.objects += 1
                remaining.discard(key)
        done.markers = self._markers(jobs, {_job_of(k) for k in remaining}, newest, now, limits, owned)
        return done

    # ------------------------------------------------------------------ reading the tier
    def _kept_versions(self, now: float) -> tuple[list[int], dict[int, Manifest]]:
        listed = versions.versions(self.tier, self.name)
        kept = {}
        for version in listed:
            self._version_seen.setdefault(version, now)
            manifest = self._manifests.get(version)
            if manifest is None:
                data = self.tier.read(versions.version_key(self.name, version))
                if data is None:            # pruned by a commit meanwhile
                    continue
                manifest = Manifest.from_json(data, self.tier.url, versions.version_key(self.name, version))
                self._manifests[version] = manifest
            kept[version] = manifest
        for gone in set(self._manifests) - set(kept):
            del self._manifests[gone]
        return sorted(kept), kept

    def _staged(self) -> list[str]:
        """Keys (under the log's folder) of the staged objects: staged/<job>/<attempt>/<file>."""
        cut = len(self.name) + 1
        return [k[cut:] for k in self.tier.keys(f"{self.name}/{STAGED}/") if k[cut:].count("/") == 3]

    def _job_markers(self) -> dict[str, dict[str, str]]:
        """By job: its markers' names (committing, aborted) -> their keys under the folder."""
        cut = len(self.name) + 1
        found: dict[str, dict[str, str]] = {}
        for key in self.tier.keys(f"{self.name}/{JOBS}/"):
            parts = key[cut:].split("/")
            if len(parts) == 3 and parts[2].endswith(".json"):
                found.setdefault(parts[1], {})[parts[2][:-5]] = key[cut:]
        for job, markers in found.items():
            if COMMITTING in markers:
                markers["deadline"] = claim_deadline(self.tier.read(f"{self.name}/{markers[COMMITTING]}"))
        return found

    # ------------------------------------------------------------------ changing the tier
    def _fence(self, job: str, jobs: dict) -> bool:
        """Claim an unclaimed job with a deadline already past; False when a driver claimed it first."""
        key = job_key(self.name, job, COMMITTING)
        if self.tier.create(key, claim_body(job, 0, fenced_by=FENCE_BY)) is None:
            return False
        jobs.setdefault(job, {}).update({COMMITTING: key[len(self.name) + 1:], "deadline": 0.0})
        return True

    def _delete(self, key: str, why: str) -> int:
        """Delete one object under an audit intent; its bytes (0 when it was gone already)."""
        size = self.tier.size(f"{self.name}/{key}") or 0
        planned = ArchiveDeletionEntry(time=self._clock(), log=self.name, path=self._url(key), segment=key,
                                       base_offset=None, end_offset=None, bytes=size, archive=self.tier.url,
                                       because=why)
        ident = self.audit.intent(IntentAction.ARCHIVE_DELETE, planned)
        try:
            self.tier.delete(f"{self.name}/{key}")
        except ArchiveError as exc:
            self.audit.outcome_or_log(ident, Event.ABORTED,
                                      AbortedEntry.of(planned, self._clock(), AbortReason.ERROR, error=str(exc)))
            raise
        self.audit.outcome_or_log(ident, Event.DELETED, replace(planned, time=self._clock()))
        self.dropped.pop(key, None)
        self._unlisted_since.pop(key, None)
        logger.info("{}: deleted {} ({} bytes) from {}: {}", self.name, key, size, self.tier.url, why)
        return size

    def _markers(self, jobs: dict, staged_jobs: set[str], newest: Manifest, now: float, limits: CollectorLimits,
                 owned: Callable[[], bool]) -> int:
        deleted = 0
        for job, markers in sorted(jobs.items()):
            state = _state(markers, job in newest.jobs)
            if not markers_left_over(state, staged=job in staged_jobs, now=now, limits=limits):
                continue
            for what in (ABORTED_MARKER, COMMITTING):
                if what in markers and owned():
                    self._delete(markers[what], JOB_DONE)
                    deleted += 1
        return deleted

    def _settle(self) -> None:
        """Finish the deletions of this log's objects whose process died (they were dead)."""
        for intent in self.audit.unresolved():
            if (intent.get("action") != IntentAction.ARCHIVE_DELETE or intent.get("archive") != self.tier.url
                    or intent.get("log") != self.name or intent.get("path") != self._url(str(intent.get("segment")))):
                continue
            self.tier.delete(f"{self.name}/{intent['segment']}")
            self.audit.outcome_or_log(intent["id"], Event.DELETED,
                                      RecoveredArchiveDeletionEntry.of(intent, self._clock(), missing=None),
                                      recovered=True)
            logger.warning("{}: settled the audit intent of an interrupted deletion of {} (pid {})", self.name,
                           intent.get("segment"), intent.get("pid"))

    def _url(self, key: str) -> str:
        return f"{self.tier.url.rstrip('/')}/{self.name}/{key}"


def _keys(manifest: Manifest) -> set[str]:
    return {k for s in manifest.segments for k in (s.data_file, s.index_file)}


def _by_job(keys: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for key in sorted(keys):
        out.setdefault(_job_of(key), []).append(key)
    return out


def _job_of(key: str) -> str:
    return key.split("/")[1]


def _state(markers: dict, committed: bool) -> JobState:
    return JobState(committed=committed, aborted=ABORTED_MARKER in markers, claimed=COMMITTING in markers,
                    deadline=markers.get("deadline"))
