"""What the `commitlog` command is given: a log directory, offsets, times, counts. Bad input
raises UsageError with one line naming what and where (the command exits 2, changing nothing).

A log is opened read-only (`CommitLog.open(path, readonly=True)`), which creates and changes
nothing in the directory, so a read-only mount or another user's log reads as well.
"""

from __future__ import annotations

import os
import re
from datetime import datetime

from ..access import unreadable
from ..errors import LogNotReadableError, NotALogError
from ..layout import META_FILE, is_log_directory
from ..log import CommitLog

__all__ = ["UsageError", "open_log", "check_log_path", "parse_count", "parse_offset", "parse_time_ms"]

_EPOCH_MS = re.compile(r"[0-9]{1,16}")
_DIGITS = re.compile(r"[0-9]{1,19}")   # ASCII only: int() would take other scripts' digits too
MAX_OFFSET = 2**63 - 1                  # offsets and counts are signed 64-bit in the store's files


class UsageError(ValueError):
    """Bad input: the message is the one line the command prints (exit 2)."""


def check_log_path(path: str) -> str:
    """The absolute path of the log directory `path`. UsageError when there is nothing there, a
    file, or a directory holding no log; LogNotReadableError when this user may not read it."""
    if not path:
        raise UsageError("PATH: give a log directory")
    full = os.path.abspath(path)
    denied = unreadable(full)
    if denied is not None:
        raise LogNotReadableError(full, denied)
    if not os.path.lexists(full):
        raise UsageError(f"{path}: no such log directory")
    if not os.path.isdir(full):
        raise UsageError(f"{path}: a file, not a log directory")
    if not is_log_directory(full):
        raise UsageError(f"{path}: not a log directory (it holds no {META_FILE})")
    return full


def open_log(path: str) -> CommitLog:
    """The log at `path`, opened read-only (see the module docstring)."""
    full = check_log_path(path)
    try:
        return CommitLog.open(full, readonly=True)
    except NotALogError as exc:   # gone, or emptied, since the check
        raise UsageError(f"{path}: {exc.reason}") from None


def parse_offset(text: str, what: str) -> int:
    """An integer offset in [0, 2**63 - 1]; UsageError naming `what` otherwise."""
    value = _integer(text)
    if value is None:
        raise UsageError(f"{what}: expected an offset (an integer >= 0 and <= {MAX_OFFSET}), got {text[:80]!r}")
    return value


def parse_count(text: str) -> int:
    """A number of records in [1, 2**63 - 1]; UsageError otherwise."""
    value = _integer(text)
    if not value:
        raise UsageError(f"--count: expected a number of records >= 1 and <= {MAX_OFFSET}, got {text[:80]!r}")
    return value


def _integer(text: str) -> int | None:
    text = text.strip()
    if not _DIGITS.fullmatch(text) or int(text) > MAX_OFFSET:
        return None
    return int(text)


def parse_time_ms(text: str, what: str) -> int:
    """Milliseconds since the epoch from an ISO 8601 time (naive: this machine's local time) or
    epoch milliseconds (digits only); UsageError naming `what` otherwise."""
    text = text.strip()
    if _EPOCH_MS.fullmatch(text):
        return int(text)
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"{what}: expected an ISO 8601 time like 2026-11-21T04:30:00+01:00 or epoch "
                         f"milliseconds like 1795686979895, got {text[:80]!r}") from None
    try:
        return round(at.astimezone().timestamp() * 1000)   # naive: taken as local time
    except (ValueError, OverflowError, OSError):   # a local time near year 1 or 9999
        raise UsageError(f"{what}: {text[:80]!r} is out of range as this machine's local time; give a "
                         f"UTC offset, like 0001-01-01T00:00:00+00:00") from None

