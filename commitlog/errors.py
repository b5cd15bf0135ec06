"""The store's errors: `CommitLogError` and its subclasses, raised on purpose by the store and its
archive tier; the Spark layer's `StagingError` subtree derives from it too
(commitlog.spark.staging_errors). Each message names what and where: the file, offset, argument
or URL. Catch CommitLogError for the whole family. A bad argument is also ValueError and
TypeError, a missing log FileNotFoundError, an unreadable one PermissionError, an offset out of
range IndexError, so code written against Python's conventions catches them too.

The whole tree, the errors of the layers above included, is drawn in docs/concepts.md
("Errors"); what to do about each is in docs/troubleshooting.md. Classes only: thread-safe.
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
        if offset < 0:
            msg = f"offset {offset} is negative: offsets start at 0 (the log holds [{start_offset}, {end_offset}))"
        elif offset < start_offset:
            msg = (f"offset {offset} was removed by retention; the log now starts at "
                   f"offset {start_offset}")
        else:
            msg = f"offset {offset} is not written yet (log holds [{start_offset}, {end_offset}))"
        super().__init__(msg)
        self.offset = offset
        self.start_offset = start_offset
        self.end_offset = end_offset


class OffsetRemovedError(OffsetOutOfRangeError):
    """The record at `offset` is dead (marked, written dead, or dropped by a compaction);
    `next_offset` is the next offset holding a live record (the log's end when there is none)."""

    def __init__(self, offset: int, next_offset: int, start_offset: int, end_offset: int,
                 why: str) -> None:
        CommitLogError.__init__(self, f"offset {offset} {why}; the next offset that still exists "
                                      f"is {next_offset}")
        self.offset = offset
        self.next_offset = next_offset
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


class UnsafeLogFileError(CommitLogError):
    """A name of the log directory's layout holds a symbolic link (or something else than the
    regular file the store keeps there): never followed, read, written or deleted through."""

    def __init__(self, path: str, what: str = "a symbolic link") -> None:
        super().__init__(f"unsafe log file {path}: it is {what}, which the store never follows; "
                         f"remove it (and find out who planted it)")
        self.path = path


class LogLockedError(CommitLogError):
    """Another process is the log's writer."""

    def __init__(self, path: str, holder_pid: int | None) -> None:
        who = f"pid {holder_pid}" if holder_pid else "another process"
        super().__init__(f"log {path} is already open for writing by {who}")
        self.path = path
        self.holder_pid = holder_pid


class NotALogError(CommitLogError, FileNotFoundError):
    """The path is not a log directory (no meta.json), or is a plain file."""

    def __init__(self, path: str, reason: str) -> None:
        self.message = f"{path} is not a commit log: {reason}"
        super().__init__(self.message)
        self.path = path
        self.reason = reason

    def __str__(self) -> str:  # OSError's would print "[Errno None] None"
        return self.message


class LogNotReadableError(CommitLogError, PermissionError):
    """This process may not read the log's directory or one of its files; `reason` names the
    path, the user the process runs as and the owner and mode it met (commitlog.access)."""

    def __init__(self, path: str, reason: str) -> None:
        self.message = f"log {path} cannot be read: {reason}"
        super().__init__(self.message)
        self.path = path
        self.reason = reason

    def __str__(self) -> str:  # OSError's would print "[Errno None] None"
        return self.message


class InvalidArgumentError(CommitLogError, ValueError, TypeError):
    """An argument of the Python API of the wrong type or value; the message names it."""


class SegmentSizeMismatchError(InvalidArgumentError):
    """The log was created with another segment size."""


class RecordTooLargeError(InvalidArgumentError):
    """A record that cannot fit in an empty segment."""


class ReadOnlyLogError(CommitLogError):
    """A write through a log opened read-only."""


class LogNotWritableError(ReadOnlyLogError):
    """The log's directory cannot be written: a read-only filesystem or no write permission."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"log {path} cannot be written: {reason} (open it with readonly=True to read it)")
        self.path = path
        self.reason = reason


class LogClosedError(CommitLogError):
    """An operation on a closed log."""


class InvalidCommitError(InvalidArgumentError):
    """A consumer commit outside [0, end_offset]."""


class ArchiveError(CommitLogError):
    """The archive tier failed an operation; `url` and `key` say where."""

    def __init__(self, url: str, key: str | None, reason: str) -> None:
        where = url if key is None else f"{url} object {key}"
        super().__init__(f"archive {where}: {reason}")
        self.url = url
        self.key = key
        self.reason = reason


class ArchiveMissingError(ArchiveError):
    """The archive tier cannot prove it is the one the log archived to, or lost what it listed
    (an unmounted directory, a bucket recreated empty): nothing is uploaded to or evicted on it."""


class ArchiveCorruptError(ArchiveError):
    """An object on the archive tier is not what was recorded (checksum, size, or format)."""
