"""The sparse per-segment index: `<base>.index` beside each `<base>.log`.

An entry (relative offset, byte position) is added each time a segment's write position crosses
another INDEX_INTERVAL bytes, so a read seeks to the nearest entry at or below its offset and scans
at most INDEX_INTERVAL bytes plus one record.

Layout: a 64-byte header, then 8-byte entries (u32 relative offset, u32 position). A position of 0
ends the entries (the record at position 0 needs no entry). The header is filled in when the
segment is sealed; its CRC covers the header fields and the entries, so a damaged or half-written
index is detected and rebuilt from the segment. For the active segment the entries double as
recovery checkpoints: recovery starts at the last entry whose record still verifies.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import mmap
import os
import struct
import zlib
from dataclasses import dataclass, field
from itertools import chain
from operator import and_, lt

from ..errors import CorruptLogError
from ..layout import INDEX_SUFFIX, SEGMENT_SUFFIX, TMP_SUFFIX, index_path, parse_segment_name
from .reserve import allocate_file
from ..safeopen import no_follow, open_file, temporary

__all__ = ["INDEX_INTERVAL", "IndexWriter", "SegmentSummary", "index_file_size", "index_path",
           "parse_sealed", "read_checkpoints", "without_base", "read_sealed", "write_sealed"]

INDEX_INTERVAL = 4096
HEADER = struct.Struct("<4sHHQQqqqII")
HEADER_SIZE = 64
ENTRY = struct.Struct("<II")
MAGIC = b"CLIX"
VERSION = 1
FLAG_SEALED = 1
# A compaction's output: the 8 bytes after the header's CRC hold the inode number (low 32 bits)
# of the data file it describes and the marks sequence the compaction read (commitlog.marks), and
# the CRC covers them. An index naming another inode is stale (a swap interrupted): rebuilt.
FLAG_COMPACTED = 2
# A compaction's output that kept a record marked dead (its rule protected it): the marks applied
# to it cannot all be forgotten (commitlog.cleanup.marks_shrink).
FLAG_KEPT_MARKED = 4
EXTRA = struct.Struct("<II")
# The 8 bytes after the entries hold the segment's base offset (u64), covered by the CRC: an index
# moved with its segment to another name is told by the name (read_sealed). Older indexes lack it.
FLAG_BASE = 8
BASE = struct.Struct("<Q")


def index_file_size(segment_size: int) -> int:
    return HEADER_SIZE + ENTRY.size * (segment_size // INDEX_INTERVAL + 2)


@dataclass(frozen=True)
class SegmentSummary:
    """What a sealed segment's index records about it. Immutable."""

    used_bytes: int
    record_count: int
    first_timestamp_ms: int
    last_timestamp_ms: int
    last_write_ns: int
    rels: tuple[int, ...] = field(default=(), repr=False)
    positions: tuple[int, ...] = field(default=(), repr=False)
    compacted: bool = False
    data_ino: int = 0        # compacted only: the data file's inode number, low 32 bits
    marks_seq: int = 0       # compacted only: marks before this sequence number are applied
    kept_marked: bool = False  # compacted only: it kept a record marked dead
    base: int | None = None  # the base offset the index records (None: an older index's)

    def end_offset(self, base: int) -> int:
        """The offset after the segment's last record, the one place that derives it.
        `record_count` counts offsets spanned: a compacted segment's offset deltas and gap records
        (record.ATTR_DELTA, ATTR_GAP) count the offsets they skip, and a gap record ends a
        compacted segment whose last offsets were removed."""
        return base + self.record_count

    def floor(self, rel: int) -> tuple[int, int]:
        """The entry (relative offset, position) at or below `rel`; (0, 0) if none."""
        i = bisect.bisect_right(self.rels, rel) - 1
        if i < 0:
            return 0, 0
        return self.rels[i], self.positions[i]


def _entries_from(buf, limit: int) -> tuple[list[int], list[int]]:
    """The entries of `buf[HEADER_SIZE:limit]`, up to the first empty or non-monotonic one.
    C-level passes (one unpack, maps): an active index holds up to 16,384 checkpoints and a
    recovery or a reader of the live segment reads them all."""
    n = (limit - HEADER_SIZE) // ENTRY.size
    if n <= 0:
        return [], []  # empty, or shorter than its header (a crash while creating it)
    flat = struct.unpack_from(f"<{2 * n}I", buf, HEADER_SIZE)
    rels, positions = flat[0::2], flat[1::2]
    try:
        n = positions.index(0)  # a position of 0 ends the entries
    except ValueError:
        pass
    rels, positions = list(rels[:n]), list(positions[:n])
    # A damaged tail of checkpoints: stop at the last strictly increasing entry.
    rising = list(map(and_, map(lt, chain((0,), rels), rels),
                      map(lt, chain((0,), positions), positions)))
    try:
        n = rising.index(False)
    except ValueError:
        return rels, positions
    return rels[:n], positions[:n]


def _pack_entries(rels, positions) -> bytes:
    return struct.pack(f"<{2 * len(rels)}I", *chain.from_iterable(zip(rels, positions)))


def read_sealed(path: str) -> SegmentSummary | None:
    """The sealed index at `path`, or None when it is missing, unsealed or damaged.
    CorruptLogError when it records a base offset other than its name's (renamed outside the
    store with its segment: the segment's records would be read at wrong offsets)."""
    try:
        with open(path, "rb", opener=no_follow) as f:
            data = f.read()
    except FileNotFoundError:
        return None
    summary = parse_sealed(data)
    if summary is not None and summary.base is not None:
        name = os.path.basename(path)
        named = parse_segment_name(name[:-len(INDEX_SUFFIX)] + SEGMENT_SUFFIX) \
            if name.endswith(INDEX_SUFFIX) else None
        if named is not None and named != summary.base:
            raise CorruptLogError(path[:-len(INDEX_SUFFIX)] + SEGMENT_SUFFIX, None,
                                  f"its name says offset {named}, but its index records base "
                                  f"offset {summary.base}: a segment file renamed outside the store?")
    return summary


def parse_sealed(data: bytes) -> SegmentSummary | None:
    """The sealed index whose bytes are `data` (an archived copy, say); None when unsealed or damaged."""
    if len(data) < HEADER_SIZE:
        return None
    magic, version, flags, used, count, first_ts, last_ts, last_ns, n, crc = HEADER.unpack_from(data, 0)
    if magic != MAGIC or version != VERSION or not flags & FLAG_SEALED:
        return None
    end = HEADER_SIZE + n * ENTRY.size
    if end > len(data):
        return None
    check = zlib.crc32(data[HEADER_SIZE:end], zlib.crc32(data[: HEADER.size - 4]))
    compacted = bool(flags & FLAG_COMPACTED)
    ino = seq = 0
    if compacted:
        extra = data[HEADER.size:HEADER.size + EXTRA.size]
        check = zlib.crc32(extra, check)
        ino, seq = EXTRA.unpack(extra)
    base = None
    if flags & FLAG_BASE:
        if end + BASE.size > len(data):
            return None
        check = zlib.crc32(data[end:end + BASE.size], check)
        base = BASE.unpack_from(data, end)[0]
    if check != crc:
        return None
    rels, positions = _entries_from(data, end)
    if len(rels) != n:
        return None
    return SegmentSummary(used, count, first_ts, last_ts, last_ns, tuple(rels), tuple(positions),
                          compacted, ino, seq, bool(flags & FLAG_KEPT_MARKED), base)


def without_base(data: bytes) -> bytes | None:
    """The sealed index `data` without the base offset it records (FLAG_BASE): an index object
    readable at whatever base a manifest gives its segment (a cluster write's staged segments,
    whose offsets the commit assigns). None when `data` is no sealed index."""
    summary = parse_sealed(data)
    return None if summary is None else _pack_sealed(dataclasses.replace(summary, base=None))


def read_checkpoints(path: str) -> tuple[list[int], list[int]]:
    """The entries of an unsealed (active) index: recovery checkpoints, possibly stale."""
    try:
        with open(path, "rb", opener=no_follow) as f:
            data = f.read()
    except FileNotFoundError:
        return [], []
    return _entries_from(data, len(data))


def _pack_sealed(summary: SegmentSummary) -> bytes:
    entries = _pack_entries(summary.rels, summary.positions)
    flags = FLAG_SEALED | (FLAG_COMPACTED if summary.compacted else 0) | \
        (FLAG_KEPT_MARKED if summary.kept_marked else 0) | (FLAG_BASE if summary.base is not None else 0)
    head = HEADER.pack(MAGIC, VERSION, flags, summary.used_bytes, summary.record_count,
                       summary.first_timestamp_ms, summary.last_timestamp_ms,
                       summary.last_write_ns, len(summary.rels), 0)[: HEADER.size - 4]
    crc = zlib.crc32(entries, zlib.crc32(head))
    extra = bytes(HEADER_SIZE - HEADER.size)
    if summary.compacted:
        extra = EXTRA.pack(summary.data_ino & 0xFFFFFFFF, summary.marks_seq)
        crc = zlib.crc32(extra, crc)
    base = b"" if summary.base is None else BASE.pack(summary.base)
    crc = zlib.crc32(base, crc)
    return head + struct.pack("<I", crc) + extra + entries + base


def write_sealed(path: str, summary: SegmentSummary, tmp: str | None = None) -> None:
    """Write a sealed index atomically (temporary file `tmp`, then rename)."""
    tmp = path + TMP_SUFFIX if tmp is None else tmp
    with open(tmp, "wb", opener=temporary) as f:
        f.write(_pack_sealed(summary))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class IndexWriter:
    """The active segment's index, written through a mapping. Used by the single writer only."""

    def __init__(self, path: str, segment_size: int, rels: list[int], positions: list[int], *,
                 mapping: mmap.mmap | None = None) -> None:
        """mapping: the file already reserved and mapped, reading as zeros (a prepared index)."""
        self.path = path
        size = index_file_size(segment_size)
        reused = False  # a file that may hold a previous life's header and entries
        if mapping is not None:
            self._mm = mapping
        else:
            try:
                reused = os.path.getsize(path) == size
            except FileNotFoundError:
                reused = False
            if reused:
                fd = open_file(path, os.O_RDWR)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)  # of another size: not ours to reuse
                fd = allocate_file(path, size, exclusive=True)
            try:
                self._mm = mmap.mmap(fd, size)
            finally:
                os.close(fd)
        self._capacity = (size - HEADER_SIZE) // ENTRY.size
        self.rels = rels
        self.positions = positions
        entries = _pack_entries(rels, positions)
        if entries:
            self._mm[HEADER_SIZE:HEADER_SIZE + len(entries)] = entries
        if reused:
            # Clear what a reused file held past what recovery kept (stale checkpoints) and its
            # header (a stale sealed header must not describe us). A new file reads as zeros, and
            # writing them anyway would fault in every page of it at each roll.
            self._mm[:HEADER_SIZE] = bytes(HEADER_SIZE)
            self._mm[HEADER_SIZE + len(entries):] = bytes(size - HEADER_SIZE - len(entries))

    def add(self, rel: int, position: int) -> None:
        n = len(self.rels)
        if n >= self._capacity:
            return
        ENTRY.pack_into(self._mm, HEADER_SIZE + n * ENTRY.size, rel, position)
        self.rels.append(rel)
        self.positions.append(position)

    def floor(self, rel: int) -> tuple[int, int]:
        i = bisect.bisect_right(self.rels, rel) - 1
        if i < 0:
            return 0, 0
        return self.rels[i], self.positions[i]

    def seal(self, summary: SegmentSummary, *, durable: bool = True) -> None:
        data = _pack_sealed(summary)
        if len(data) > len(self._mm):  # every entry slot used: no room for the base offset
            data = _pack_sealed(dataclasses.replace(summary, base=None))
        self._mm[: len(data)] = data
        if durable:
            self._mm.flush()

    def close(self) -> None:
        if not self._mm.closed:
            self._mm.close()
