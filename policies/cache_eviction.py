"""Which copies a host's cache of a cluster log lets go: its local directory holds copies of tier
objects (commitlog.archive.local_copies), so evicting one loses nothing the tier does not hold.

Rules (``evict_copies``), oldest first (by the entry's ``archived_at``, else the file's mtime):

- A copy the newest manifest version does not list (a job not committed yet, one that never will
  be, one total retention dropped) goes once its file is older than ``unlisted_after`` seconds
  (the commit deadline plus a margin), whatever the triggers (``unlisted``).
- A listed copy goes, as an archived segment is evicted, when a trigger is active (the hour
  window, the disk above ``clean_ratio``, a manual pass) and it is older than ``reserve``
  (``expired``); while the listed copies take more than ``retention_bytes`` (``size-cap``); and
  while the disk is above ``clean_ratio`` (``disk-clean``, ``disk-force`` or ``refuse-writes``,
  the first active), down to ``force_target``: a cache goes before any local log's data.

Pure: the time, the triggers and the disk usage are inputs; thread-safe.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from policies.config import PolicyConfig
from policies.reasons import EXPIRED
from policies.triggers import DISK_CLEAN, DISK_FORCE, REFUSE_WRITES, SIZE_CAP

__all__ = ["CachedCopy", "UNLISTED", "evict_copies"]

UNLISTED = "unlisted"
"""Why a copy goes that no manifest version lists (declared here once)."""


@dataclass(frozen=True)
class CachedCopy:
    """One file of a cache. Immutable."""

    key: str                         # the tier object's key below the log's folder
    bytes: int                       # what the file takes on disk
    mtime: float                     # epoch seconds
    archived_at: float | None        # its entry's archived time (epoch seconds); None: unlisted

    @property
    def since(self) -> float:
        return self.mtime if self.archived_at is None else self.archived_at


def evict_copies(copies: Sequence[CachedCopy], *, policy: PolicyConfig, triggers: Sequence[str],
                 used_bytes: int, total_bytes: int, now: float,
                 unlisted_after: float) -> list[tuple[CachedCopy, str]]:
    """The copies to evict now, each with why, oldest first (see the module docstring)."""
    pressing = next((t for t in (DISK_FORCE, REFUSE_WRITES, DISK_CLEAN) if t in triggers), None)
    target = policy.disk.force_target_ratio * total_bytes
    listed = sum(c.bytes for c in copies if c.archived_at is not None)
    used = used_bytes
    out: list[tuple[CachedCopy, str]] = []
    for copy in sorted(copies, key=lambda c: (c.since, c.key)):
        why = _why(copy, policy, triggers, now, unlisted_after, listed)
        if why is None and pressing is not None and used > target:
            why = pressing
        if why is None:
            continue
        out.append((copy, why))
        used -= copy.bytes
        if copy.archived_at is not None:
            listed -= copy.bytes
    return out


def _why(copy: CachedCopy, policy: PolicyConfig, triggers: Sequence[str], now: float,
         unlisted_after: float, listed: int) -> str | None:
    if copy.archived_at is None:
        return UNLISTED if now - copy.mtime > unlisted_after else None
    if triggers and now - copy.since > policy.reserve:
        return EXPIRED
    if policy.retention_bytes is not None and listed > policy.retention_bytes:
        return SIZE_CAP
    return None
