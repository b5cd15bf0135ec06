"""`CommitLog.open()`'s settings: each one's unit, default and validation, defined once here.

The settings the configuration carries too (segment_size, the write guard's ratios) come from
`storesettings`, which `policies` reads as well; `commitlog.spark` takes its defaults from here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from storesettings import (REFUSE_WRITES_RATIO_DEFAULT, RESUME_RATIO_DEFAULT, SEGMENT_SIZE_DEFAULT,
                           SEGMENT_SIZE_MAX, SEGMENT_SIZE_MIN)

from .errors import InvalidArgumentError

DEFAULT_SEGMENT_SIZE = SEGMENT_SIZE_DEFAULT   # bytes (storesettings: shared with the configuration)
MIN_SEGMENT_SIZE = SEGMENT_SIZE_MIN
MAX_SEGMENT_SIZE = SEGMENT_SIZE_MAX
FLUSH_MODES = ("sync", "async", "none")
DEFAULT_FLUSH = "async"
DEFAULT_FLUSH_INTERVAL = 0.5          # seconds between two background flushes (flush="async")
DEFAULT_REFUSE_WRITES_RATIO = REFUSE_WRITES_RATIO_DEFAULT
DEFAULT_RESUME_RATIO = RESUME_RATIO_DEFAULT
ON_FULL_MODES = ("raise", "block")
DEFAULT_ON_FULL = "raise"
DEFAULT_BLOCK_TIMEOUT = 30.0          # seconds an on_full="block" append waits before raising


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class LogOptions:
    """The settings of one open log, validated at construction (InvalidArgumentError, a
    ValueError, naming the setting). Immutable.

    segment_size: bytes per segment of a new log; None = the log's own (or the default for a new
    log). flush: "sync" (each append reaches the disk before it returns), "async" (a background
    flush every `flush_interval` seconds) or "none" (the OS decides). refuse_writes_ratio /
    resume_ratio / on_full / block_timeout: the writer's disk guard (refuse_writes_ratio=None
    disables it). roll_after: seconds after a segment's first record at which it is sealed short
    even when not full (a time-based roll, Kafka's segment.ms); None: segments roll when full only."""

    segment_size: int | None = None
    readonly: bool = False
    flush: str = DEFAULT_FLUSH
    flush_interval: float = DEFAULT_FLUSH_INTERVAL
    refuse_writes_ratio: float | None = DEFAULT_REFUSE_WRITES_RATIO
    resume_ratio: float = DEFAULT_RESUME_RATIO
    on_full: str = DEFAULT_ON_FULL
    block_timeout: float = DEFAULT_BLOCK_TIMEOUT
    roll_after: float | None = None

    def __post_init__(self) -> None:
        size = self.segment_size
        if size is not None:
            if not isinstance(size, int) or isinstance(size, bool):
                raise InvalidArgumentError(
                    f"segment_size must be an int number of bytes, got {size!r}")
            if not MIN_SEGMENT_SIZE <= size <= MAX_SEGMENT_SIZE:
                raise InvalidArgumentError(f"segment_size must be between {MIN_SEGMENT_SIZE} and "
                                           f"{MAX_SEGMENT_SIZE} bytes, got {size}")
        if not isinstance(self.readonly, bool):
            raise InvalidArgumentError(f"readonly must be True or False, got {self.readonly!r}")
        if self.flush not in FLUSH_MODES:
            raise InvalidArgumentError(
                f"flush must be one of {', '.join(FLUSH_MODES)}, got {self.flush!r}")
        if not _number(self.flush_interval) or not self.flush_interval > 0:
            raise InvalidArgumentError(
                f"flush_interval must be positive seconds, got {self.flush_interval!r}")
        if self.on_full not in ON_FULL_MODES:
            raise InvalidArgumentError(
                f"on_full must be one of {', '.join(ON_FULL_MODES)}, got {self.on_full!r}")
        if not _number(self.block_timeout) or not self.block_timeout >= 0:
            raise InvalidArgumentError(
                f"block_timeout must be zero or positive seconds, got {self.block_timeout!r}")
        if self.roll_after is not None and (not _number(self.roll_after) or not self.roll_after > 0):
            raise InvalidArgumentError(f"roll_after must be positive seconds or None, got {self.roll_after!r}")
        refuse = self.refuse_writes_ratio
        if refuse is not None:
            if not _number(refuse) or not 0 < refuse <= 1:
                raise InvalidArgumentError(f"refuse_writes_ratio must be in (0, 1], got {refuse!r}")
            if not _number(self.resume_ratio) or not 0 < self.resume_ratio <= refuse:
                raise InvalidArgumentError(
                    f"resume_ratio must be in (0, refuse_writes_ratio={refuse}], "
                    f"got {self.resume_ratio!r}")
