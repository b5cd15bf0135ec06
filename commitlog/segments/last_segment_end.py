"""The end of the last segment, written by another process, kept between calls: a sidecar asks
for it every pass, and an idle log's answer has not changed.

Kept: the segment file's identity (device, inode), the summary found, the last bytes before its
end and the last checkpoint that verified. Unchanged when the file is the same, those bytes are
the same and nothing follows them: one open and one pread, where a fresh answer takes a shared
flock, a mapping, the index's checkpoints and a scan. The file's mtime cannot tell: writes through
a shared mapping do not reliably update it. Changed: the scan resumes from the kept checkpoint
(`scan_segment` verifies its record first, and scans from the start when it does not verify).

Immutable values and pure functions: thread- and process-safe.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from .index import SegmentSummary
from ..errors import UnsafeLogFileError
from ..record import LENGTH
from ..safeopen import open_read

_TAIL = 32                           # bytes before the end compared: the last record's, CRC-checked


class LiveEnd(NamedTuple):
    base: int
    file_id: tuple[int, int]         # (st_dev, st_ino) of the segment file
    summary: SegmentSummary
    tail: bytes
    rel: int                         # the last verified checkpoint: relative offset, position
    position: int


def file_id(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def remember(base: int, ident: tuple[int, int] | None, summary: SegmentSummary, mm,
             rels: list[int], positions: list[int]) -> LiveEnd | None:
    """What to keep after a scan of `mm` found `summary` (rels / positions: the checkpoints the
    scan verified)."""
    if ident is None:
        return None
    end = summary.used_bytes
    tail = bytes(mm[max(0, end - _TAIL):end]) if mm is not None else b""
    rel, pos = (rels[-1], positions[-1]) if positions else (0, 0)
    return LiveEnd(base, ident, summary, tail, rel, pos)


def unchanged(kept: LiveEnd, path: str) -> bool:
    """True when `path` is still the file `kept` describes and nothing was appended after it (False
    when anything else than a regular file is there now: the scan says what)."""
    try:
        fd, st = open_read(path)
    except (OSError, UnsafeLogFileError):
        return False
    try:
        if (st.st_dev, st.st_ino) != kept.file_id:
            return False
        end = kept.summary.used_bytes
        if end + LENGTH.size > st.st_size:
            return False                 # full: the scan decides whether it was sealed
        tail = kept.tail
        data = os.pread(fd, len(tail) + LENGTH.size, end - len(tail))
    finally:
        os.close(fd)
    return data == tail + bytes(LENGTH.size)  # the same last bytes, then no record


def end_mark(path: str, used_bytes: int) -> tuple | None:
    """What tells that no record was appended to segment `path` after `used_bytes` and that it is
    the same file: (device, inode, size, the bytes before `used_bytes`); equal marks, taken at two
    moments, mean nothing was appended between (as `unchanged`). None when it is gone, is no
    regular file now (a link planted there: the plan that follows says so, for its log only), or a
    record follows `used_bytes` already."""
    try:
        fd, st = open_read(path)
    except (OSError, UnsafeLogFileError):
        return None
    try:
        start = max(0, used_bytes - _TAIL)
        room = min(LENGTH.size, max(0, st.st_size - used_bytes))   # a full segment has no next length
        data = os.pread(fd, used_bytes - start + room, start)
    finally:
        os.close(fd)
    if data[used_bytes - start:] != bytes(room):
        return None
    return st.st_dev, st.st_ino, st.st_size, data
