"""When a compaction first saw each tombstone it kept: `<log>/tombstones`, for the retention of
tombstones (policies.liveness counts `tombstone_retention` from that instant).

    entry (20 bytes): offset u64, first seen (epoch seconds) f64, CRC32 u32 of the 16 before

Append-only; a tombstone already noted keeps its first time (the earliest entry wins). Writers
hold an exclusive flock and fsync before returning; a torn last entry (a crash) fails its CRC and
is ignored, then overwritten. Entries below the log's start offset are dropped by the reader.
Process-safe through the flock; a `TombstoneBook` is not shared between threads.
"""

from __future__ import annotations

import fcntl
import os
import struct
import zlib
from collections.abc import Mapping

from ..safeopen import no_follow, open_file

ENTRY = struct.Struct("<QdI")


class TombstoneBook:
    """The first-seen times of the tombstones of one log; see the module docstring."""

    def __init__(self, path: str) -> None:
        self.path = path

    def first_seen(self, start_offset: int = 0) -> dict[int, float]:
        """Offset -> epoch seconds, for the tombstones at or after `start_offset`."""
        try:
            with open(self.path, "rb", opener=no_follow) as f:
                data = f.read()
        except FileNotFoundError:
            return {}
        return {o: t for o, t in _entries(data) if o >= start_offset}

    def note(self, seen: Mapping[int, float]) -> int:
        """Record the tombstones of `seen` not recorded yet; returns how many were new."""
        fd = open_file(self.path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            data = os.pread(fd, os.fstat(fd).st_size, 0)
            known = dict(_entries(data))
            good = _good_length(data)
            new = [(o, t) for o, t in sorted(seen.items()) if o not in known]
            if new:
                payload = b"".join(_pack(o, t) for o, t in new)
                os.pwrite(fd, payload, good)
                os.ftruncate(fd, good + len(payload))
                os.fsync(fd)
            return len(new)
        finally:
            os.close(fd)


def _pack(offset: int, seconds: float) -> bytes:
    head = struct.pack("<Qd", offset, seconds)
    return head + struct.pack("<I", zlib.crc32(head))


def _entries(data: bytes):
    out: dict[int, float] = {}
    for i in range(0, _good_length(data), ENTRY.size):
        offset, seconds, _ = ENTRY.unpack_from(data, i)
        out.setdefault(offset, seconds)
    return out.items()


def _good_length(data: bytes) -> int:
    """Bytes of the entries up to the first torn one."""
    n = 0
    while n + ENTRY.size <= len(data):
        if zlib.crc32(data[n:n + 16]) != ENTRY.unpack_from(data, n)[2]:
            break
        n += ENTRY.size
    return n
