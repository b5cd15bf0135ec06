"""A cluster write's job on the tier, outside its manifest versions: what its tasks staged and the
markers its driver leaves (docs/spark-cluster.md), the one spelling of their keys and claims.

Keys under the log's folder `<log>/`:
    staged/<job>/<attempt>/<k>.log, .index   what one task attempt staged
    jobs/<job>/committing.json               a commit's claim: {"job", "deadline_ms"[, "fenced_by"]}
    jobs/<job>/aborted.json                  an aborted job: {"job"}

A driver never creates the manifest version of a job after its claim's deadline; a collector
may take the job's staged objects once the deadline is long past. Pure names and bodies:
thread- and process-safe.
"""

from __future__ import annotations

import json

from .validation import epoch_ms

__all__ = ["ABORTED", "COMMITTING", "DEFAULT_COMMIT_TIMEOUT", "JOBS", "STAGED", "claim_body",
           "claim_deadline", "job_key", "staged_prefix"]

STAGED = "staged"
JOBS = "jobs"
COMMITTING = "committing"
ABORTED = "aborted"
DEFAULT_COMMIT_TIMEOUT = 600.0        # seconds a driver may take to commit, from its claim


def staged_prefix(name: str, job_id: str, attempt_id: str) -> str:
    return f"{name}/{STAGED}/{job_id}/{attempt_id}/"


def job_key(name: str, job_id: str, what: str) -> str:
    """`<name>/jobs/<job>/<what>.json`; `what` is COMMITTING or ABORTED."""
    return f"{name}/{JOBS}/{job_id}/{what}.json"


def claim_body(job_id: str, deadline_ms: int, **extra: str) -> bytes:
    return json.dumps({"job": job_id, "deadline_ms": deadline_ms, **extra}).encode()


def claim_deadline(data: bytes | None) -> float | None:
    """A claim's deadline in seconds since the epoch; None when it is missing or unreadable."""
    try:
        deadline = json.loads(data)["deadline_ms"]
    except (TypeError, ValueError, KeyError, RecursionError):
        return None
    return deadline / 1000 if epoch_ms(deadline) else None
