"""Damage in the last segment's tail, told from a torn write (used by recovery at a writer's open).

Where the scan of the last segment stops at bytes that do not verify, what follows decides:
nothing verifying after them is a torn write (a crash cut it: recovery cuts it quietly); a record
that verifies after them is damage, mended so that every record that verifies is kept:

- the bad record's boundary is known (its length, or a length one byte away, is followed by a
  record that verifies): a record whose body verifies with that other length only had its length
  damaged and is written back whole; otherwise it is rewritten as a dead record (ATTR_DEAD, same
  size, its bytes kept as its value), so its one offset reads as removed and the rest keep theirs;
- the boundary is lost: the records after it cannot be given offsets; their bytes are saved aside
  (`<segment>.<byte>.damaged`) before the tail is cut.

Each is an entry of the log's damage record (commitlog.damage). Pure functions over a writable
mapping, but for the file saved aside; used under the writer lock.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from .. import damage
from .. import record as rec
from ..layout import damaged_path
from ..safeopen import temporary

_ZEROS = bytes(1 << 20)
SEARCH_LIMIT = 4 << 20       # bytes searched for a record after damage; what lies further is saved


class Mended(NamedTuple):
    entry: dict
    resume: bool             # the record at the position verifies now: the scan goes on from it


def written_end(mm, pos: int, size: int) -> int:
    """The end of the last non-zero byte from `pos` (== pos when there is none)."""
    last = pos
    p = pos
    while p < size:
        q = min(p + len(_ZEROS), size)
        data = mm[p:q]
        # One comparison skips a zero megabyte (rstrip alone walks it byte by byte).
        if len(data) < len(_ZEROS) or data != _ZEROS:
            stripped = len(data.rstrip(b"\0"))
            if stripped:
                last = p + stripped
        p = q
    return last


def torn_write(mm, size: int, pos: int) -> bool:
    """Whether the bytes at `pos` that do not verify are a torn write, as `mend` tells it (nothing
    verifies after them: recovery cuts them quietly), rather than damage. Reads only."""
    end = written_end(mm, pos, size)
    if end <= pos or pos + rec.FRAME_SIZE > size or rec.FRAME.unpack_from(mm, pos) == (0, 0):
        return True
    return end <= pos + SEARCH_LIMIT and _next_verifying(mm, pos + 1, end, size) is None


def mend(mm, size: int, pos: int, offset: int, last_ts: int, path: str) -> Mended | None:
    """Mend the damage at `pos` of segment `path` (mapped writable as `mm`, `size` bytes; `offset`
    the offset a record there has, `last_ts` the time of the record before). None for a torn
    write or a clean end: nothing verifies after `pos`."""
    end = written_end(mm, pos, size)
    if end <= pos or pos + rec.FRAME_SIZE > size:
        return None
    length, crc = rec.FRAME.unpack_from(mm, pos)
    if length == 0 and crc == 0:
        return None          # a frame not written yet: large records are written frame last
    for cand in _lengths(length):
        after = pos + rec.FRAME_SIZE + cand
        if cand < rec.BODY_HEAD_SIZE or after > size:
            continue
        follows = rec.decode_at(mm, after, size).status == rec.OK
        if cand != length and (follows or after >= end) and \
                rec.crc32(mm[pos + rec.FRAME_SIZE:after]) == crc:
            rec.LENGTH.pack_into(mm, pos, cand)
            return Mended(damage.entry(path, pos, cand + rec.FRAME_SIZE, damage.LENGTH_REPAIRED,
                                       (offset, offset), f"the length of the record at offset "
                                       f"{offset} read {length}; its body verifies with {cand}, "
                                       f"written back: nothing lost"), True)
        if cand == length and follows:
            _rewrite_dead(mm, pos, length, last_ts)
            return Mended(damage.entry(path, pos, after - pos, damage.RECORD_LOST,
                                       (offset, offset + 1), f"the record at offset {offset} does "
                                       f"not verify: lost (it reads as removed); the records after "
                                       f"it verify and are kept at their offsets"), True)
    found = _next_verifying(mm, pos + 1, min(end, pos + SEARCH_LIMIT), size)
    if found is None and end <= pos + SEARCH_LIMIT:
        return None          # nothing verifies after it: a torn write
    saved = damaged_path(path, pos)
    _save(saved, mm[pos:end])
    where = f"a record verifies at byte {found}" if found is not None else \
        f"more than {SEARCH_LIMIT} bytes follow"
    return Mended(damage.entry(path, pos, end - pos, damage.RECORDS_UNPLACED, None,
                               f"records from offset {offset} on are lost: the record there does "
                               f"not verify and {where}, but where records end is unknown, so no "
                               f"offset can be given to them; their bytes are saved aside",
                               os.path.basename(saved)), False)


def _lengths(length: int):
    """`length`, then every length one byte away from it."""
    yield length
    for shift in (0, 8, 16, 24):
        byte = (length >> shift) & 0xFF
        for v in range(256):
            if v != byte:
                yield (length & ~(0xFF << shift)) | (v << shift)


def _rewrite_dead(mm, pos: int, length: int, ts: int) -> None:
    """The record at `pos`, `length` body bytes, rewritten as a dead record of the same size: its
    body head replaced (dead, no key, the time of the record before), the rest kept as its value."""
    head = rec.BODY_HEAD.pack(rec.ATTR_DEAD, ts, -1)
    end = pos + rec.FRAME_SIZE + length
    crc = rec.crc32(mm[pos + rec.HEADER_SIZE:end], rec.crc32(head))
    mm[pos:pos + rec.HEADER_SIZE] = rec.FRAME.pack(length, crc) + head


def _next_verifying(mm, start: int, stop: int, size: int) -> int | None:
    """The first position in [start, stop) where a record verifies."""
    unpack = rec.LENGTH.unpack_from
    decode = rec.decode_at
    low, high = rec.BODY_HEAD_SIZE, rec.END_MARKER
    for q in range(start, min(stop, size - rec.HEADER_SIZE + 1)):
        length = unpack(mm, q)[0]
        if low <= length < high and q + rec.FRAME_SIZE + length <= size \
                and decode(mm, q, size).status == rec.OK:
            return q
    return None


def _save(path: str, data: bytes) -> None:
    """`data` durably in `path` (a crash's earlier copy replaced); UnsafeLogFileError, before the
    tail is cut, when a symbolic link is planted there."""
    with open(path, "wb", opener=temporary) as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
