"""Checking the arguments of the Python API, for a clear InvalidArgumentError naming the argument.

The append paths do not call these per record: they let a wrong type fail where it is first used
(before anything is written) and ask here which argument it was. Pure functions: thread-safe.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from .record import ATTR_RESERVED
from .errors import InvalidArgumentError, InvalidCommitError

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

_BYTES_LIKE = (bytes, bytearray, memoryview)
_I64 = 1 << 63


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_record(value: object, key: object, timestamp_ms: object, attributes: object,
                 where: str = "") -> None:
    """InvalidArgumentError for the first argument of a record that is of the wrong type or out
    of range; returns when all are fine."""
    if not isinstance(value, _BYTES_LIKE):
        raise InvalidArgumentError(
            f"value{where} must be bytes-like (bytes, bytearray, memoryview), got "
            f"{type(value).__name__}{' (encode it first)' if isinstance(value, str) else ''}")
    if key is not None and not isinstance(key, _BYTES_LIKE):
        raise InvalidArgumentError(
            f"key{where} must be bytes-like or None, got {type(key).__name__}")
    if timestamp_ms is not None and (not _int(timestamp_ms) or not -_I64 <= timestamp_ms < _I64):
        raise InvalidArgumentError(
            f"timestamp_ms must be an int of milliseconds (64-bit) or None, got {timestamp_ms!r}")
    if not _int(attributes) or not 0 <= attributes <= 0xFF:
        raise InvalidArgumentError(f"attributes must be an int in [0, 255], got {attributes!r}")
    if attributes & ATTR_RESERVED:
        raise InvalidArgumentError(f"attributes {attributes:#x} has bit "
                                   f"{attributes & ATTR_RESERVED:#x} set, which only compaction "
                                   f"writes (a gap of removed offsets, or an offset delta)")


def check_batch(values: list, timestamp_ms: object, attributes: object) -> None:
    """check_record for each value of a batch (after one failed), naming its index."""
    check_record(b"", None, timestamp_ms, attributes)
    for i, value in enumerate(values):
        check_record(value, None, timestamp_ms, attributes, f" [{i}] of the batch")


def check_offset(name: str, offset: object, segs=None) -> None:
    """An offset must be a non-negative int."""
    if not _int(offset):
        raise InvalidArgumentError(f"{name} must be an int, got {type(offset).__name__} {offset!r}")
    if offset < 0:
        if segs is not None:
            raise segs.out_of_range(offset)  # an OffsetOutOfRangeError saying it is negative
        raise InvalidArgumentError(f"{name} must be zero or positive, got {offset}")


def timestamp_ms_of(name: str, when: object) -> object:
    """`when` in milliseconds since the epoch when it is a timezone-aware datetime (exact, floored);
    a naive one is refused (whose clock it reads is unknown); anything else is returned as given."""
    if isinstance(when, datetime):
        if when.utcoffset() is None:
            raise InvalidArgumentError(f"{name}: a naive datetime {when.isoformat()} names no timezone: give an "
                                       f"aware one (datetime.now(timezone.utc)) or milliseconds since the epoch")
        return (when - _EPOCH) // timedelta(milliseconds=1)
    return when


def check_timestamp(name: str, timestamp_ms: object) -> None:
    """A timestamp must be an int: milliseconds since the epoch."""
    if not _int(timestamp_ms):
        raise InvalidArgumentError(f"{name} must be an int (milliseconds since the epoch), got "
                                   f"{type(timestamp_ms).__name__} {timestamp_ms!r}")


def check_scan_range(start: object, end: object) -> None:
    if start is not None:
        check_offset("start", start)
    if end is not None:
        check_offset("end", end)
    if start is not None and end is not None and end < start:
        raise InvalidArgumentError(f"scan end {end} is before its start {start}")


def check_commit(group: object, offset: object, end: int, path: str) -> None:
    if not isinstance(group, str) or not group or not group.isprintable():
        raise InvalidCommitError(
            f"consumer group name must be a non-empty printable string, got {group!r}")
    if not _int(offset):
        raise InvalidCommitError(f"cannot commit offset {offset!r} for group {group!r} in {path}: "
                                 f"an offset is an int")
    if offset < 0 or offset > end:
        raise InvalidCommitError(
            f"cannot commit offset {offset} for group {group!r} in {path}: "
            f"it must be between 0 and the end offset {end}")
