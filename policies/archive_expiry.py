"""Total retention: which archived segments a log's archive tier deletes, by time and size, with
consumer groups protected there as local retention protects them on disk.

Rules (``expire_archived`` applies them, oldest first, stopping at the first segment it keeps, so
the archive never has a hole):

- A segment the local disk still holds is kept (``local``): the archive goes after the disk, so
  a reader never finds a local segment whose archive copy is gone first.
- A segment holding an offset a live consumer group has not consumed is kept
  (``unconsumed:GROUP``), with ``protect_unconsumed``; a group silent past ``consumer_ttl``
  protects nothing. Nothing forces here: the archive is where unconsumed data waits.
- Otherwise it goes when its last record is older than ``archive.reserve`` (``total-reserve``)
  or while the archive holds more than ``archive.retention_bytes`` of the log
  (``total-size``); with neither, it is kept (``total-retention``).

Pure: the time and the consumer state are inputs; thread-safe.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from policies.config import PolicyConfig
from policies.planner import stale_groups
from policies.reasons import unconsumed
from policies.snapshot import GroupSnapshot

__all__ = ["ArchiveExpiry", "ArchivedSegmentSnapshot", "LOCAL", "TOTAL_RESERVE", "TOTAL_RETENTION", "TOTAL_SIZE",
           "expire_archived"]

LOCAL = "local"
TOTAL_RESERVE = "total-reserve"
TOTAL_SIZE = "total-size"
TOTAL_RETENTION = "total-retention"


@dataclass(frozen=True)
class ArchivedSegmentSnapshot:
    """One segment the archive's manifest lists. Immutable."""

    base_offset: int
    end_offset: int
    bytes: int
    last_record_at: float
    """Epoch seconds of its last record (of its upload when it holds no timestamp)."""


@dataclass(frozen=True)
class ArchiveExpiry:
    """What total retention deletes now: the oldest ``expired`` segments, each with why, and why
    the first one kept is (None when none is left or none was looked at)."""

    expired: tuple[tuple[ArchivedSegmentSnapshot, str], ...]
    kept_because: str | None


def expire_archived(segments: Sequence[ArchivedSegmentSnapshot], *, local_start: int,
                    groups: Sequence[GroupSnapshot], policy: PolicyConfig, now: float) -> ArchiveExpiry:
    """Decide the archived ``segments`` (oldest first) of a log whose local disk starts at
    ``local_start``, at ``now`` (epoch seconds), under ``policy`` (see the module docstring)."""
    archive = policy.archive
    stale = set(stale_groups(groups, now, policy.consumer_ttl))
    protecting = sorted((g for g in groups if g.name not in stale), key=lambda g: g.name) \
        if policy.protect_unconsumed else []
    left = sum(s.bytes for s in segments)
    expired = []
    for segment in segments:
        if segment.end_offset > local_start:
            return ArchiveExpiry(tuple(expired), LOCAL)
        behind = next((g for g in protecting if g.committed_offset < segment.end_offset), None)
        if behind is not None:
            return ArchiveExpiry(tuple(expired), unconsumed(behind.name))
        if archive.reserve is not None and now - segment.last_record_at > archive.reserve:
            why = TOTAL_RESERVE
        elif archive.retention_bytes is not None and left > archive.retention_bytes:
            why = TOTAL_SIZE
        else:
            return ArchiveExpiry(tuple(expired), TOTAL_RETENTION)
        expired.append((segment, why))
        left -= segment.bytes
    return ArchiveExpiry(tuple(expired), None)
