"""The time-based roll of a log no writer has open: a retention pass (the sidecar's or `retention
clean`) seals the last segment short once its first record is `roll_after` old, as the writer itself
would at its next append (commitlog.append.writer). A log with a writer open is left to it: that
writer rolls by its own `roll_after`, at its next append or from its background thread.

The roll takes the log's writer lock for the few milliseconds it needs, with a note that says so; a
writer opening meanwhile waits for it (commitlog.locks.ROLLING_WAIT) instead of failing. Under the
lock it is a writer's open (recovery included: a torn tail is cut as a writer's open would) and a
seal, nothing prepared ahead. Thread- and process-safe: the lock serialises it with any writer.
"""

from __future__ import annotations

import os
import time

from .errors import LogLockedError, NotALogError
from .layout import is_log_directory
from .locks import ROLLING
from .opening import open_directory
from .options import LogOptions
from .append.guard import DiskGuard

ROLLED = "rolled"              # the last segment was sealed short
NOT_DUE = "not-due"            # nothing to roll: empty, sealed already, or younger than roll_after
WRITER_OPEN = "writer-open"    # a writer has the log open: its own roll_after applies


def roll_idle(path: str | os.PathLike, roll_after: float, *, now_ns: int | None = None) -> str:
    """Seal the last segment of the log at `path` if no writer has it open and its first record is
    `roll_after` seconds old (at `now_ns`, default now); returns ROLLED, NOT_DUE or WRITER_OPEN.
    Errors of the open (NotALogError, CorruptLogError, LogNotWritableError, OSError) propagate."""
    path = os.path.abspath(os.fspath(path))
    options = LogOptions(flush="none", refuse_writes_ratio=None, roll_after=roll_after)
    if not is_log_directory(path):
        raise NotALogError(path, "no such log directory")
    guard = DiskGuard(path, None, options.resume_ratio, options.on_full, options.block_timeout, lambda: None)
    try:
        parts = open_directory(path, options, guard, lock_note=ROLLING)
    except LogLockedError:
        return WRITER_OPEN
    try:
        return ROLLED if parts.writer.roll_if_due(time.time_ns() if now_ns is None else now_ns) else NOT_DUE
    finally:
        parts.close(flush=False)
