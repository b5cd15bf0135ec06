"""A segment as the log describes it to callers (`CommitLog.segments()`).

A segment is a fixed-size file named by the 20-digit, zero-padded logical offset of its first
record (`00000000000000000000.log`, see commitlog.layout); its records are framed as
commitlog.record says, its sparse index sits beside it (commitlog.index).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SegmentInfo:
    """A segment as `CommitLog.segments()` describes it. Immutable."""

    base_offset: int
    path: str
    size: int
    used_bytes: int
    first_timestamp_ms: int | None
    last_timestamp_ms: int | None
    mtime: float
    active: bool
    record_count: int = 0

    @property
    def end_offset(self) -> int:
        """The offset after the segment's last record (as far as written, for the active one)."""
        return self.base_offset + self.record_count
