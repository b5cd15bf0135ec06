"""When local retention may act on what a log's archive tier says, and when an unarchived segment
may go under disk pressure while the tier could still take it.

- Eviction trusts the tier's manifest (as this host copied it) only while the tier proved itself
  within ``trust_window`` (``CONFIRM_INTERVALS`` upload intervals, at least ``CONFIRM_MIN_S``): a tier
  that went away, cannot be asked, or lost what it listed evicts nothing (``commitlog.archive.identity``).
- Under a disk force below ``refuse_writes_ratio`` (``disk-force``), an unarchived segment is kept while
  the tier is up (``archive_up``: it proved itself within ``up_window``, nothing is missing, and its
  last upload run did not fail): the force started an upload run, and the archived segments are
  evicted as they land. It goes (data lost, audited so) when the tier is down, or when the disk
  reaches ``refuse_writes_ratio`` (``refuse-writes`` among the triggers): the tier did not keep up.

Pure functions of plain values; thread-safe.
"""

from __future__ import annotations

from collections.abc import Collection

from policies.config import ArchiveConfig
from policies.triggers import DISK_FORCE, REFUSE_WRITES

__all__ = ["CONFIRM_INTERVALS", "CONFIRM_MIN_S", "not_archived_detail", "trust_window", "unarchived_may_go",
           "up_window"]

CONFIRM_INTERVALS = 3
CONFIRM_MIN_S = 10.0


def trust_window(archive: ArchiveConfig) -> float:
    """Seconds a tier's last proof is trusted for eviction."""
    return max(CONFIRM_INTERVALS * archive.interval, CONFIRM_MIN_S)


def up_window(archive: ArchiveConfig) -> float:
    """Seconds a tier's last proof keeps it *up* for a disk force (``archive.lag_unhealthy``, at
    least ``trust_window``): a sidecar restarted under pressure waits for its first upload run
    instead of deleting what a tier that was fine a moment ago would take."""
    return max(trust_window(archive), archive.lag_unhealthy)


def unarchived_may_go(triggers: Collection[str], archive_up: bool) -> bool:
    """Whether a pass with these active triggers, forcing, may delete a segment its log's archive
    does not hold yet."""
    return REFUSE_WRITES in triggers or (DISK_FORCE in triggers and not archive_up)


def not_archived_detail(url: str, doubt: str | None = None) -> str:
    """Why a segment counts as not archived: not uploaded yet, or a tier not trusted now."""
    return f"not in the archive {url} yet" if doubt is None else \
        f"the archive {url} is not trusted now ({doubt}): nothing it lists counts as archived"
