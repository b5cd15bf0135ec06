"""A segment as the log describes it to callers (`CommitLog.segments()`).

A segment is a fixed-size file named by the 20-digit, zero-padded logical offset of its first
record (`00000000000000000000.log`, see commitlog.layout); its records are framed as
commitlog.record says, its sparse index sits beside it (commitlog.segments.index).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SegmentInfo:
    """A segment as `CommitLog.segments()` describes it. Immutable.

    live_bytes: used_bytes minus the framed bytes of records marked dead (`mark_dead`), kept
    without rereading the segment; records written dead (ATTR_DEAD) count until a compaction drops
    them, and keyed liveness (superseded keys, tombstones) is learnt only by a compaction's scan.
    A compacted segment's offset deltas and gap records count as live (they cannot be reclaimed
    but by merging).
    active: a writer may still append to it: the last segment, unless a roll sealed it (a
    time-based roll, `roll_after`, seals the last segment before the next exists)."""

    base_offset: int
    path: str
    size: int
    used_bytes: int
    first_timestamp_ms: int | None
    last_timestamp_ms: int | None
    mtime: float
    active: bool
    record_count: int = 0
    live_bytes: int | None = None

    @property
    def end_offset(self) -> int:
        """The offset after the segment's last record (as far as written, for the active one).
        `record_count` counts offsets spanned, so a compacted segment's gaps are included."""
        return self.base_offset + self.record_count

    @property
    def live_ratio(self) -> float | None:
        """live_bytes / used_bytes (1.0 for an empty segment)."""
        if self.live_bytes is None:
            return None
        return self.live_bytes / self.used_bytes if self.used_bytes else 1.0
