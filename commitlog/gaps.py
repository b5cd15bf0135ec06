"""The offsets compactions removed with whole segments, in `<log>/compacted`: what tells a
compaction's gap between segment files from a segment lost (deleted, renamed) outside the store.

Below the start offset an offset was removed by retention (OffsetOutOfRangeError); in a range this
file records, by a compaction (passed silently); any other gap between segment files, or between
`start.offset` and the first segment, is CorruptLogError naming the range. The file (magic "CLGP",
sorted disjoint ranges, a CRC32) is replaced whole through `compacted.tmp`; a compaction records a
range before it unlinks the segments (commitlog.cleanup.swap), so there is never a gap without its
record. While the file is missing and `.compact.lock` exists, every gap counts as a compaction's
and is adopted (`adopt`). Layout, crash order and the pre-`start.offset` case: docs, Concepts,
"The `compacted` file".

Functions over a directory; process-safe for writers under the removal lock, readers lock-free
(a rename replaces the file whole).
"""

from __future__ import annotations

import bisect
import contextlib
import os
import struct
import zlib
from dataclasses import dataclass

from .errors import CorruptLogError
from .safeopen import open_file
from .layout import TMP_SUFFIX, compact_lock_path, compacted_path, fsync_directory

_HEAD = struct.Struct(">4sI")
_RANGE = struct.Struct(">QQ")
_CRC = struct.Struct(">I")
_MAGIC = b"CLGP"
MAX_RANGES = 1 << 20                    # 16 MiB: far more gaps than a log has segments


@dataclass(frozen=True)
class CompactedRanges:
    """The ranges a compaction removed, sorted and disjoint. `legacy`: the file is missing on a
    log an older store compacted (every gap counts as recorded). Immutable."""

    starts: tuple[int, ...] = ()
    ends: tuple[int, ...] = ()
    legacy: bool = False

    def unrecorded(self, lo: int, hi: int) -> tuple[int, int] | None:
        """The first part of [lo, hi) no range covers; None when all of it is covered."""
        if self.legacy or lo >= hi:
            return None
        i = bisect.bisect_right(self.starts, lo) - 1
        if i >= 0 and self.ends[i] > lo:
            lo = self.ends[i]
            if lo >= hi:
                return None
            i += 1
        else:
            i += 1
        return (lo, min(hi, self.starts[i]) if i < len(self.starts) else hi)

    def covered_from(self, hi: int, floor: int) -> int:
        """The lowest offset o >= `floor` with [o, hi) covered (`hi` when none below it is)."""
        if self.legacy:
            return min(floor, hi)
        i = bisect.bisect_left(self.ends, hi)
        if i < len(self.starts) and self.starts[i] < hi:
            return max(floor, self.starts[i])
        return hi

    def pairs(self) -> list[tuple[int, int]]:
        return list(zip(self.starts, self.ends))


def read(directory: str) -> CompactedRanges:
    """The ranges recorded for the log at `directory`; CorruptLogError for a damaged file."""
    path = compacted_path(directory)
    try:
        fd = open_file(path, os.O_RDONLY)  # a planted link: UnsafeLogFileError, never read through
    except FileNotFoundError:
        return CompactedRanges(legacy=os.path.exists(compact_lock_path(directory)))
    try:
        raw = os.read(fd, _HEAD.size + MAX_RANGES * _RANGE.size + _CRC.size + 1)
    finally:
        os.close(fd)
    return decode(raw, path)


def decode(raw: bytes, path: str) -> CompactedRanges:
    if len(raw) < _HEAD.size + _CRC.size:
        raise CorruptLogError(path, None, f"compacted ranges file is {len(raw)} bytes, too short")
    magic, count = _HEAD.unpack_from(raw)
    size = _HEAD.size + count * _RANGE.size + _CRC.size
    if magic != _MAGIC or count > MAX_RANGES or len(raw) != size or \
            _CRC.unpack_from(raw, size - _CRC.size)[0] != zlib.crc32(raw[:size - _CRC.size]):
        raise CorruptLogError(path, None, "compacted ranges file does not verify (magic, length "
                                          "or checksum)")
    flat = struct.unpack_from(f">{2 * count}Q", raw, _HEAD.size)
    starts, ends = flat[0::2], flat[1::2]
    if any(s >= e for s, e in zip(starts, ends)) or any(e >= s for e, s in zip(ends, starts[1:])):
        raise CorruptLogError(path, None, "compacted ranges are not sorted and disjoint")
    return CompactedRanges(starts, ends)


def encode(pairs: list[tuple[int, int]]) -> bytes:
    body = _HEAD.pack(_MAGIC, len(pairs)) + b"".join(_RANGE.pack(s, e) for s, e in pairs)
    return body + _CRC.pack(zlib.crc32(body))


def merged(pairs: list[tuple[int, int]], start_offset: int) -> list[tuple[int, int]]:
    """`pairs` sorted, overlapping and adjacent ones merged, those below `start_offset` pruned."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(p for p in pairs if p[1] > start_offset and p[0] < p[1]):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def record(directory: str, ranges: list[tuple[int, int]], start_offset: int) -> None:
    """Durably add `ranges` (call with the removal lock held, before their segments go)."""
    known = read(directory)
    write(directory, merged(known.pairs() + list(ranges), start_offset))


def write(directory: str, pairs: list[tuple[int, int]]) -> None:
    if len(pairs) > MAX_RANGES:
        raise CorruptLogError(compacted_path(directory), None,
                              f"{len(pairs)} compacted ranges, more than {MAX_RANGES}")
    path = compacted_path(directory)
    tmp = path + TMP_SUFFIX
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # a crash's leftover, or something planted: never written through
    fd = open_file(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        try:
            os.write(fd, encode(pairs))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_directory(directory)


def adopt(directory: str, gaps: list[tuple[int, int]], start_offset: int, *, legacy: bool) -> bool:
    """Create the file when missing (call with the removal lock held): with `gaps` (every gap
    found between segment files) on a log an older store compacted (`legacy`), empty otherwise.
    True when it was created."""
    if os.path.lexists(compacted_path(directory)):
        return False
    write(directory, merged(gaps if legacy else [], start_offset))
    return True
