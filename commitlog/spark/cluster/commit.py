"""The driver's commit of a cluster write: the job's staged segments become visible at once, in
one new manifest version, or not at all (docs/spark-cluster.md).

1. The claim: `<log>/jobs/<job>/committing.json`, created with the deadline (now + timeout);
   found already (the same job's commit retried), its deadline stands.
2. Every staged object the messages name is checked: its size and the SHA-256 the tier stored.
3. The CAS: read the newest manifest version V; V listing the job: done (exactly once); else
   create V+1 = V plus the job's segments at offsets from V's end. Another driver created V+1
   first: read again and retry (at most MAX_TRIES, with jitter). Never after the deadline: the
   deadline is checked before each create, so a collector may take the job's staged objects once
   the deadline is long past.
4. Best effort: `manifest.json` and pruning (commitlog.archive.versions.publish).

`abort` creates `<log>/jobs/<job>/aborted.json` and deletes the staged objects, best effort.
Process-safe through the tier's create alone; no state in the driver.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from commitlog.archive import Manifest, Tier, versions
from commitlog.archive.job_claims import (ABORTED, COMMITTING, DEFAULT_COMMIT_TIMEOUT, claim_body,
                                          claim_deadline, job_key)
from commitlog.errors import ArchiveError

from ..staging_errors import ClusterCommitError
from .staging import StagedSegment, unstage

log = logging.getLogger("commitlog.spark")

CHECKERS = 4                          # staged objects checked at once by a commit
MAX_TRIES = 50                        # manifest versions lost to other drivers before giving up


@dataclass(frozen=True)
class Committed:
    """Where a job's records landed: offsets [first, end) of manifest `version`."""

    version: int
    first: int
    end: int
    already: bool = False            # an earlier commit of the same job made it visible


def claim(tier: Tier, name: str, job_id: str, timeout: float, now: Callable[[], float]) -> float:
    """Create the job's claim with its deadline (seconds since the epoch); the existing claim's
    deadline when this job's commit is being retried."""
    key = job_key(name, job_id, COMMITTING)
    deadline = now() + timeout
    if tier.create(key, claim_body(job_id, int(deadline * 1000))) is not None:
        return deadline
    found = claim_deadline(tier.read(key))
    if found is None:
        raise ClusterCommitError(f"job {job_id}: its claim {key} on {tier.url} is unreadable: not committed")
    return found


def check_staged(tier: Tier, name: str, job_id: str, staged: list[StagedSegment]) -> None:
    """ClusterCommitError naming a staged object that is missing or differs. The objects are
    asked CHECKERS at a time (a directory tier hashes each one whole)."""
    expected = [(k, size, sha) for s in staged
                for k, size, sha in ((s.key, s.bytes, s.sha256), (s.index_key, s.index_bytes, s.index_sha256))]
    with ThreadPoolExecutor(CHECKERS, thread_name_prefix="commitlog-check") as pool:
        found = pool.map(lambda e: tier.head(f"{name}/{e[0]}"), expected)
        for (key, size, sha), info in zip(expected, found):
            why = "missing" if info is None else f"{info.size} bytes, staged {size}" \
                if info.size != size else None if info.sha256 == sha else \
                f"SHA-256 {info.sha256}, staged {sha}"
            if why is not None:
                raise ClusterCommitError(f"job {job_id}: staged object {name}/{key} on {tier.url}: "
                                         f"{why}: not committed")


def commit(tier: Tier, name: str, job_id: str, staged: list[StagedSegment],
           merge_schema: Callable[[str | None], str], *, timeout: float = DEFAULT_COMMIT_TIMEOUT,
           now: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep) -> Committed:
    """Make the job's `staged` segments visible once (steps 1-4 of the module docstring).
    `merge_schema(stored)` gives the schema to record over the newest version's (raises when the
    job's rows cannot be appended). ClusterCommitError when the job is not committed."""
    deadline = claim(tier, name, job_id, timeout, now)
    check_staged(tier, name, job_id, staged)
    for attempt in range(MAX_TRIES):
        found = versions.newest(tier, name)
        version, manifest = found if found is not None else (0, Manifest(name))
        if job_id in manifest.jobs:
            return _landed(manifest, job_id, version)
        first = manifest.end_offset
        entries, base, stamp = [], first, int(now() * 1000)
        for s in staged:
            entries.append(s.at(base, stamp))
            base += s.records
        following = manifest.with_job(job_id, entries, merge_schema(manifest.spark_schema))
        if now() > deadline:
            raise ClusterCommitError(f"job {job_id}: its commit deadline passed before the manifest of "
                                     f"log {name} on {tier.url} took it: not committed")
        if versions.create_version(tier, name, version + 1, following):
            _publish(tier, name, version + 1, following)
            return Committed(version + 1, first, base)
        sleep(random.uniform(0.005, 0.02) * min(attempt + 1, 10))
    raise ClusterCommitError(f"job {job_id}: {MAX_TRIES} newer manifest versions of log {name} on "
                             f"{tier.url} were created by other commits first: not committed")


def _landed(manifest: Manifest, job_id: str, version: int) -> Committed:
    """A job an earlier commit made visible (its records' offsets are not recorded by job)."""
    return Committed(version, manifest.end_offset, manifest.end_offset, already=True)


def _publish(tier: Tier, name: str, version: int, manifest: Manifest) -> None:
    try:
        versions.publish(tier, name, version, manifest)
    except ArchiveError as exc:
        log.warning("log %s on %s: version %d committed; manifest.json or pruning failed (%s)",
                    name, tier.url, version, exc)


def abort(tier: Tier, name: str, job_id: str, staged: list[StagedSegment]) -> None:
    """Mark the job aborted and delete its staged objects; a failure leaves them for the collector."""
    try:
        tier.create(job_key(name, job_id, ABORTED), json.dumps({"job": job_id}).encode())
        unstage(tier, name, staged)
    except ArchiveError as exc:
        log.warning("job %s aborted; its staged objects on %s stay for the collector (%s)",
                    job_id, tier.url, exc)
