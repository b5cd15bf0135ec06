"""Taking turns at the log's single writer lock: many python worker processes, one writer at a time.

The store admits one writer process (`CommitLog.open` takes `<log>/.lock`; a second open gets
`LogLockedError`), and Spark runs tasks in separate python worker processes. A task (or the driver
creating a log) takes the Spark append turn, an exclusive `flock` on `<log>/.spark-append.lock`,
opens the log for writing (waiting out any other writer, such as an application appending
directly, up to `lockTimeout`), appends, closes the log and releases the turn; it makes its records
durable (`sync_segments`) after the turn, while the next task appends.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator

from commitlog import CommitLog, LogLockedError, parse_segment_name, segment_name
from commitlog.layout import SPARK_TURN_FILE
from commitlog.safeopen import open_file

from ..staging_errors import WriterTurnTimeout
from ..source_options import Options

TURN_FILE = SPARK_TURN_FILE


def _attempts(timeout: float, first: float, cap: float) -> Iterator[bool]:
    """Yield before each attempt whether it is the last (`timeout` seconds have passed), sleeping
    between attempts with pauses doubling from `first` up to `cap`."""
    deadline = time.monotonic() + timeout
    pause = first
    while True:
        yield time.monotonic() >= deadline
        time.sleep(pause)
        pause = min(pause * 2, cap)


@contextlib.contextmanager
def append_turn(path: str, timeout: float) -> Iterator[None]:
    """Hold the Spark append turn of the log at `path` (an exclusive flock), waiting up to
    `timeout` seconds for it."""
    fd = open_file(os.path.join(path, TURN_FILE), os.O_RDWR | os.O_CREAT)
    try:
        for last in _attempts(timeout, 0.001, 0.02):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if last:
                    raise WriterTurnTimeout(
                        f"waited {timeout:g}s for a turn to append to commit log {path}: other "
                        f"tasks kept it (raise option lockTimeout)") from None
        yield
    finally:
        os.close(fd)


def open_for_append(options: Options, segment_size: int | None, timeout: float) -> CommitLog:
    """Open the log for writing, waiting up to `timeout` seconds while another process (not a
    Spark task of ours: they take turns) is its writer."""
    for last in _attempts(timeout, 0.005, 0.1):
        try:
            return CommitLog.open(
                options.path, segment_size, flush="none",   # tasks sync after their turn
                refuse_writes_ratio=options.refuse_writes_ratio,
                resume_ratio=min(0.85, options.refuse_writes_ratio or 0.85),
                on_full=options.on_full, block_timeout=options.block_timeout)
        except LogLockedError as exc:
            if last:
                raise WriterTurnTimeout(
                    f"waited {timeout:g}s to open commit log {options.path} for writing: {exc} "
                    f"(raise option lockTimeout, or stop that writer)") from exc
    raise AssertionError("unreachable: _attempts never ends")


def sync_segments(path: str, first: int, last: int) -> None:
    """fdatasync the segment files holding offsets first..last. The log is opened with
    flush="none" (no msync under the turn); syncing the file afterwards writes back the pages
    dirtied through the mapping just the same, while the next task already appends. The records
    are on disk before the task reports them, so a committed job never names a lost record."""
    bases = sorted(b for b in map(parse_segment_name, os.listdir(path)) if b is not None)
    for i, base in enumerate(bases):
        nxt = bases[i + 1] if i + 1 < len(bases) else None
        if base > last or (nxt is not None and nxt <= first):
            continue
        try:
            fd = open_file(os.path.join(path, segment_name(base)), os.O_RDONLY)
        except FileNotFoundError:
            continue     # removed by retention meanwhile: nothing left to make durable
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)
