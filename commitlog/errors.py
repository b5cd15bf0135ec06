"""The error tree of the whole project, documented in one place.

    CommitLogError                      base of every error this project raises on purpose
    ├── StoreFullError                  the disk has no room: allocation failed (ENOSPC) or the writer
    │                                   refused the append because the disk is above refuse_writes_ratio
    ├── OffsetOutOfRangeError           the offset is below the log's start (removed by retention) or
    │                                   at/after its end; carries start_offset and end_offset
    ├── CorruptLogError                 a record or file failed validation; names the file and position
    ├── LogLockedError                  another process holds the writer lock; names its pid
    ├── SegmentSizeMismatchError        reopened with a segment_size other than the one it was created with
    ├── RecordTooLargeError             a record larger than a whole segment
    ├── ReadOnlyLogError                a write through a log opened with readonly=True
    ├── LogClosedError                  an operation on a closed log
    ├── InvalidCommitError              a consumer commit below zero or beyond end_offset
    ├── (retention) PassRunningError    lives in retention.scheduler: a manual pass asked for while one
    │                                   runs (POST /clean answers 409); names the running pass
    └── (policies) ConfigError          lives in policies.config: a bad configuration file
                                        (a ValueError; one line naming file, line, key path, reason)

All are subclasses of CommitLogError so callers can catch the family; the ones that are about a
bad argument are also ValueError.
"""

from __future__ import annotations


class CommitLogError(Exception):
    """Base class of the errors raised by the commit log."""


class StoreFullError(CommitLogError):
    """No room to write: ENOSPC while allocating, or the disk guard refused the write."""

    def __init__(self, message: str, *, used_ratio: float | None = None) -> None:
        super().__init__(message)
        self.used_ratio = used_ratio


class OffsetOutOfRangeError(CommitLogError, IndexError):
    """The offset is not in the log: removed by retention (below start) or not written yet."""

    def __init__(self, offset: int, start_offset: int, end_offset: int | None = None) -> None:
        if offset < start_offset:
            msg = (f"offset {offset} was removed by retention; the log now starts at "
                   f"offset {start_offset}")
        else:
            msg = f"offset {offset} is not written yet (log holds [{start_offset}, {end_offset}))"
        super().__init__(msg)
        self.offset = offset
        self.start_offset = start_offset
        self.end_offset = end_offset


class CorruptLogError(CommitLogError):
    """A file of the log failed validation; `path` and `position` say where."""

    def __init__(self, path: str, position: int | None, reason: str) -> None:
        where = f"{path}" if position is None else f"{path} at byte {position}"
        super().__init__(f"corrupt log file {where}: {reason}")
        self.path = path
        self.position = position
        self.reason = reason


class LogLockedError(CommitLogError):
    """Another process is the log's writer."""

    def __init__(self, path: str, holder_pid: int | None) -> None:
        who = f"pid {holder_pid}" if holder_pid else "another process"
        super().__init__(f"log {path} is already open for writing by {who}")
        self.path = path
        self.holder_pid = holder_pid


class SegmentSizeMismatchError(CommitLogError, ValueError):
    """The log was created with another segment size."""


class RecordTooLargeError(CommitLogError, ValueError):
    """A record that cannot fit in an empty segment."""


class ReadOnlyLogError(CommitLogError):
    """A write through a log opened read-only."""


class LogClosedError(CommitLogError):
    """An operation on a closed log."""


class InvalidCommitError(CommitLogError, ValueError):
    """A consumer commit outside [0, end_offset]."""
