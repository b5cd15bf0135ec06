"""The planner's input: a plain-data picture of each log, its consumers and its disk at one instant.

The retention side takes the snapshot (reading the store, the consumer state and the filesystem); the
planner only reads it. All classes here are frozen dataclasses holding immutable values, so a snapshot
can be shared between threads and reused for several plans.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["DiskSnapshot", "GroupSnapshot", "HungSegment", "LogSnapshot", "SegmentSnapshot"]


def live_ratio(live_bytes: int | None, used_bytes: int | None) -> float | None:
    """A segment's live share as reports give it: ``live_bytes / used_bytes``, 1.0 for a segment
    without records (nothing in it is dead), None when either is unknown. Compaction ranks by
    another figure (:func:`policies.compaction.rewrite_share`)."""
    if live_bytes is None or used_bytes is None:
        return None
    return live_bytes / used_bytes if used_bytes else 1.0


@dataclass(frozen=True)
class SegmentSnapshot:
    """One segment file of a log. Immutable."""

    base_offset: int
    """Logical offset of the segment's first record (its file name)."""
    end_offset: int
    """Exclusive: the offset after the segment's last record (as far as written, for the active
    segment). A compaction may leave a gap up to the next segment's base offset."""
    path: str
    size_bytes: int
    """Bytes the file takes on disk: the full segment size (segments are preallocated), or less
    for a compacted segment."""
    mtime: float
    """Epoch seconds of the last write to the segment."""
    active: bool
    """True for the segment being written."""
    used_bytes: int | None = None
    """Bytes of records in it (None: not known to the caller)."""
    live_bytes: int | None = None
    """Bytes of its records that are not dead (``used_bytes`` less the marked ones); None: unknown."""
    index_bytes: int = 0
    """Bytes its index file takes on disk, freed with it (a pressure walk counts them toward its
    target, or it deletes one segment too many); 0 when unknown."""
    sealed: bool = False
    """True when no writer appends to it again although it is the log's last segment (a time-based
    roll sealed it before the next segment existed): the last segment is kept unless sealed."""
    archived_at: float | None = None
    """Epoch seconds since which the log's archive tier holds the whole segment (its manifest lists
    it); None when it does not, or the log has no archive."""

    def __post_init__(self) -> None:
        if self.end_offset < self.base_offset:
            raise ValueError(f"segment {self.path}: end_offset {self.end_offset} is below base_offset {self.base_offset}")
        if self.size_bytes < 0:
            raise ValueError(f"segment {self.path}: size_bytes must not be negative, got {self.size_bytes}")
        if self.index_bytes < 0:
            raise ValueError(f"segment {self.path}: index_bytes must not be negative, got {self.index_bytes}")
        if self.live_bytes is not None and not 0 <= self.live_bytes <= (self.used_bytes or 0):
            raise ValueError(f"segment {self.path}: expected 0 <= live_bytes <= used_bytes, got "
                             f"{self.live_bytes}, {self.used_bytes}")

    @property
    def live_ratio(self) -> float | None:
        return live_ratio(self.live_bytes, self.used_bytes)

    @property
    def name(self) -> str:
        """The segment's file name, e.g. ``00000000000000000120.log``."""
        return os.path.basename(self.path)


@dataclass(frozen=True)
class GroupSnapshot:
    """A consumer group's progress on one log. Immutable."""

    name: str
    committed_offset: int
    """The group has consumed every offset below this one."""
    last_commit_at: float
    """Epoch seconds of the group's last commit."""


@dataclass(frozen=True)
class DiskSnapshot:
    """Usage of the filesystem holding a log, as ``df`` shows it. Immutable."""

    filesystem_id: int
    """``st_dev`` of the log directory; logs with the same id share the disk."""
    total_bytes: int
    used_bytes: int
    free_bytes: int
    """Bytes available to unprivileged users (``df``'s Avail, not counting the root reserve)."""
    forcing: bool = False
    """A disk force is under way (``policies.pressure``): ``disk-force`` lasts down to ``force_target``."""

    @property
    def used_ratio(self) -> float:
        """``used / (used + free)``, which is ``df``'s Use%; 0.0 for a filesystem reporting neither."""
        denominator = self.used_bytes + self.free_bytes
        return self.used_bytes / denominator if denominator > 0 else 0.0


@dataclass(frozen=True)
class HungSegment:
    """A segment an earlier delete attempt found held by a reader. Immutable."""

    first_attempt_at: float
    """Epoch seconds of the first attempt that found it held (``force_after`` counts from here)."""
    last_attempt_at: float
    """Epoch seconds of the latest attempt (``retry_every`` counts from here)."""


def _frozen_mapping(mapping: Mapping[int, HungSegment]) -> Mapping[int, HungSegment]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class LogSnapshot:
    """One log at one instant: its segments, consumer groups, disk and hung segments. Immutable.

    ``segments`` and ``groups`` are stored as tuples and ``hung`` as a read-only mapping whatever
    sequence or mapping was passed in, so a caller's later changes cannot reach the snapshot.
    """

    name: str
    path: str
    policy: str
    """Name of the policy in the configuration that governs this log."""
    segments: tuple[SegmentSnapshot, ...]
    """Ordered by base offset, oldest first; the last one is the active segment."""
    groups: tuple[GroupSnapshot, ...]
    disk: DiskSnapshot
    hung: Mapping[int, HungSegment] = field(default_factory=lambda: MappingProxyType({}), hash=False)
    """Base offset -> state, for segments earlier passes found held by a reader."""
    archive_up: bool = False
    """The log's archive tier is up and trusted (``policies.archive_trust``): a disk force below
    refuse_writes_ratio keeps its unarchived segments for it."""
    archive_doubt: str | None = None
    """Why nothing the log's archive lists counts as archived now (the tier went away, or was not
    confirmed lately); None when it is trusted or there is none."""

    def __post_init__(self) -> None:
        # Frozen dataclasses allow assignment only through object.__setattr__, here to freeze the inputs.
        object.__setattr__(self, "segments", tuple(self.segments))
        object.__setattr__(self, "groups", tuple(self.groups))
        object.__setattr__(self, "hung", _frozen_mapping(self.hung))
        bases = [segment.base_offset for segment in self.segments]
        if any(later <= earlier for earlier, later in zip(bases, bases[1:])):
            raise ValueError(f"log {self.name}: segments must be ordered by base_offset without repeats, got {bases}")
        if any(segment.active for segment in self.segments[:-1]):
            raise ValueError(f"log {self.name}: only the last segment may be active")
        names = [group.name for group in self.groups]
        if len(set(names)) != len(names):
            raise ValueError(f"log {self.name}: consumer group names repeat: {sorted(names)}")
