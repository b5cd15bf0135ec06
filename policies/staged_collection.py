"""The collector of a cluster log's tier: which objects under `staged/<job>/<attempt>/` are dead,
which superseded manifest versions may go, and which job markers are left over.

Invariant: an object any kept manifest version lists is never dead. Any other is kept for
``grace`` from when the lease owner first saw it unlisted by the newest version, then it is dead
for one reason: ``total-reserve`` or ``total-size`` (total retention dropped it),
``attempt-unlisted`` (its job committed without it), ``claim-expired`` or ``job-aborted`` (its
claim past its deadline by ``claim_grace``; a claim not past it keeps it), ``job-aborted`` or
``unclaimed`` (no claim: aborted, or seen for ``staged_max_age``; the job is fenced first with a
claim already past its deadline). A superseded version goes after ``grace``; a job's markers go
as ``job-done``. The rules and why: docs, Spark on a cluster, "Retention on the tier".

Pure: every time is an input; thread-safe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["ATTEMPT_UNLISTED", "CLAIM_EXPIRED", "COLLECTOR_REASONS", "CollectorReason", "JOB_ABORTED", "JOB_DONE", "UNCLAIMED", "CollectorLimits",
           "JobState", "dead_reason", "markers_left_over", "prunable_versions"]

class CollectorReason(StrEnum):
    """Why the staged collector deletes an object of the tier (its audit lines' `because`)."""

    JOB_ABORTED = "job-aborted"
    ATTEMPT_UNLISTED = "attempt-unlisted"
    CLAIM_EXPIRED = "claim-expired"
    UNCLAIMED = "unclaimed"
    JOB_DONE = "job-done"             # a job's markers, once nothing of it is staged


JOB_ABORTED, ATTEMPT_UNLISTED = CollectorReason.JOB_ABORTED, CollectorReason.ATTEMPT_UNLISTED
CLAIM_EXPIRED, UNCLAIMED, JOB_DONE = CollectorReason.CLAIM_EXPIRED, CollectorReason.UNCLAIMED, CollectorReason.JOB_DONE
COLLECTOR_REASONS = tuple(CollectorReason)


@dataclass(frozen=True)
class CollectorLimits:
    """Seconds: ``grace`` for readers, past a claim's deadline, and unclaimed staged objects' age."""

    grace: float
    claim_grace: float
    staged_max_age: float


@dataclass(frozen=True)
class JobState:
    """What the tier says of one job: committed (in the newest version's `jobs`), aborted, and
    its claim's deadline (epoch seconds; None: no claim; ``claimed`` with no deadline: unreadable)."""

    committed: bool = False
    aborted: bool = False
    claimed: bool = False
    deadline: float | None = None


def dead_reason(*, listed: bool, unlisted_since: float, dropped: str | None, job: JobState, now: float,
                limits: CollectorLimits) -> str | None:
    """Why a staged object is dead now, or None to keep it (see the module docstring).
    ``unlisted_since``: when the owner first saw it unlisted by the newest version; ``dropped``:
    total retention's reason when the owner dropped its entry."""
    if listed or now - unlisted_since < limits.grace:
        return None
    if dropped is not None:
        return dropped
    if job.committed:
        return ATTEMPT_UNLISTED
    if job.claimed:
        if job.deadline is not None and now > job.deadline + limits.claim_grace:
            return JOB_ABORTED if job.aborted else CLAIM_EXPIRED
        return None
    if job.aborted:
        return JOB_ABORTED
    if now - unlisted_since >= limits.staged_max_age:
        return UNCLAIMED
    return None


def prunable_versions(versions: Sequence[int], holding: set[int], first_seen: Mapping[int, float], *, now: float,
                      grace: float) -> list[int]:
    """Of ``versions`` (oldest first, the newest last), those in ``holding`` (they list an object
    the newest does not) that a newer version, first seen at ``first_seen[v]``, superseded for
    ``grace``."""
    out = []
    for i, version in enumerate(versions[:-1]):
        newer = [first_seen[v] for v in versions[i + 1:] if v in first_seen]
        if version in holding and newer and now - min(newer) >= grace:
            out.append(version)
    return out


def markers_left_over(job: JobState, *, staged: bool, now: float, limits: CollectorLimits) -> bool:
    """Whether a job's markers (claim, abort) may go: nothing of it staged, and it is aborted,
    committed, or past its claim's deadline by ``claim_grace``."""
    if staged:
        return False
    expired = job.claimed and job.deadline is not None and now > job.deadline + limits.claim_grace
    return job.aborted or job.committed or expired
