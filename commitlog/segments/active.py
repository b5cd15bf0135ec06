"""The active segment: the one being written, with every append path and its index bookkeeping.

Records are framed here (layout in commitlog.record) and copied into the segment's mapping; each
time the write position crosses another INDEX_INTERVAL bytes, the record starting there gets an
index entry. The hot paths bind the frame's structs to module globals and stay inline: no
per-record call beyond `append` itself.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import errno
import logging
import mmap
import os
import sys
import time
from array import array
from itertools import chain, repeat
from operator import add as _add

from .. import record as rec
from ..errors import StoreFullError
from .index import INDEX_INTERVAL, IndexWriter, SegmentSummary
from ..layout import fsync_directory, index_path, segment_name, touch_directory
from ..locks import try_exclusive
from .prealloc import PreparedSegment
from .reserve import allocate_file
from ..safeopen import open_file

_BODY_HEAD_PACK = rec.BODY_HEAD.pack
_BODY_HEAD_SIZE = rec.BODY_HEAD_SIZE
_HEADER_SIZE = rec.HEADER_SIZE
_FRAME_SIZE = rec.FRAME_SIZE
_FRAME_PACK = rec.FRAME.pack
_crc32 = rec.crc32
_RESERVED = rec.ATTR_RESERVED
LARGE_RECORD = 1 << 16                # records at least this big are written without a join
# write_uniform drops CRCs in from array("I").tobytes(): it needs 4-byte little-endian items.
UNIFORM_CRCS = array("I").itemsize == 4 and sys.byteorder == "little"
NEVER_NS = 1 << 63                    # a roll_due_ns no clock reaches: no time-based roll
log = logging.getLogger("commitlog")


class ActiveSegment:
    """The segment being written. Owned by the single writer; callers serialise access (the
    log's lock). Not thread-safe. Its fields are read by the log, written only here."""

    def __init__(self, base_offset: int, path: str, size: int, fd: int, index: IndexWriter,
                 position: int = 0, count: int = 0, first_ts: int | None = None,
                 last_ts: int | None = None, last_write_ns: int | None = None,
                 mapping: mmap.mmap | None = None) -> None:
        self.base_offset = base_offset
        self.path = path
        self.size = size
        try:
            self.mm = mapping if mapping is not None else mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.index = index
        self.position = position
        self.count = count
        self.first_ts = first_ts
        self.last_ts = last_ts
        self.last_write_ns = last_write_ns if last_write_ns is not None else time.time_ns()
        self.next_index_at = (index.positions[-1] if index.positions else 0) + INDEX_INTERVAL
        self.flushed_to = position
        self._head_ts: int | None = None  # the cached body head of append (attributes 0, no key)
        self._head = b""
        self._head_crc = 0
        # When a time-based roll is due (ns since the epoch; the writer sets it, see
        # commitlog.append.writer): NEVER_NS without one, 0 while the first record's time is unknown.
        self.roll_due_ns = NEVER_NS

    @classmethod
    def create(cls, directory: str, base_offset: int, size: int,
               prepared: PreparedSegment | None = None, *, durable: bool = True) -> "ActiveSegment":
        """Create the segment starting at `base_offset`, from a prepared file when there is one.
        durable: fsync the directory so the new name survives a power loss."""
        path = os.path.join(directory, segment_name(base_offset))
        ipath = index_path(path)
        mapping = None
        if prepared is not None:
            try:
                os.rename(prepared.path, path)
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
                # ext4 needs a new directory block for the name when the directory's are full:
                # give the prepared space back, so head removal can make room.
                prepared.close()
                for leftover in (prepared.path, prepared.index_path):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(leftover)
                raise StoreFullError(f"no space left to name the segment {path}: {exc}") from exc
            fd, mapping = prepared.fd, prepared.mapping
        else:
            fd = allocate_file(path, size, exclusive=True)
        try:
            if prepared is not None:
                os.rename(prepared.index_path, ipath)
                index = IndexWriter(ipath, size, [], [], mapping=prepared.index_mapping)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(ipath)  # a crash's leftover: the writer below starts from zeros
                index = IndexWriter(ipath, size, [], [])
        except BaseException as exc:
            if prepared is not None:
                prepared.close()
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(prepared.index_path)  # its space back too, as when the name fails
            else:
                os.close(fd)
            os.unlink(path)
            if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
                # ext4 needs a new directory block for the name when the directory's are full.
                raise StoreFullError(f"no space left to name the index {ipath}: {exc}") from exc
            raise
        if durable:
            fsync_directory(directory)
        return cls(base_offset, path, size, fd, index, mapping=mapping)

    @property
    def end_offset(self) -> int:
        """The offset the next record appended here gets (the segment knows its end)."""
        return self.base_offset + self.count

    # ------------------------------------------------------------------ appending
    def append(self, value, key, timestamp_ms: int | None, attributes: int, now_ns: int) -> int:
        """Append one record; its offset, or -1 when it does not fit (the caller rolls). The hot
        path of CommitLog.append: one clock read (`now_ns`) serves the timestamp and the last
        write time; the body head and its CRC are reused while the millisecond does not change."""
        ts = now_ns // 1_000_000 if timestamp_ms is None else timestamp_ms
        if key is None:
            klen = -1
            total = _HEADER_SIZE + len(value)
        else:
            klen = len(key)
            total = _HEADER_SIZE + klen + len(value)
        pos = self.position
        if pos + total > self.size:
            return -1
        if total >= LARGE_RECORD:
            self._write_large(pos, value, key, klen, ts, attributes)
        elif klen < 0 and attributes == 0:
            if ts != self._head_ts:
                head = _BODY_HEAD_PACK(0, ts, -1)
                self._head_crc = _crc32(head)
                self._head = head
                self._head_ts = ts
            self.mm[pos:pos + total] = (_FRAME_PACK(total - _FRAME_SIZE, _crc32(value, self._head_crc))
                                        + self._head + value)
        else:
            if attributes & _RESERVED:
                return -1  # refused: the caller's check_record names it (a roll never follows)
            head = _BODY_HEAD_PACK(attributes, ts, klen)
            if klen > 0:
                crc = _crc32(value, _crc32(key, _crc32(head)))
                self.mm[pos:pos + total] = _FRAME_PACK(total - _FRAME_SIZE, crc) + head + key + value
            else:
                crc = _crc32(value, _crc32(head))
                self.mm[pos:pos + total] = _FRAME_PACK(total - _FRAME_SIZE, crc) + head + value
        rel = self.count
        self.position = pos + total
        self.count = rel + 1
        self.last_ts = ts  # first_ts: summary() reads it from record 0
        self.last_write_ns = now_ns
        if pos >= self.next_index_at:
            self.index.add(rel, pos)
            self.next_index_at = pos + INDEX_INTERVAL
        return self.base_offset + rel

    def _write_large(self, pos: int, value, key, klen: int, ts: int, attributes: int) -> None:
        """One big record piece by piece, frame last, without joining it in memory first."""
        mm = self.mm
        head = _BODY_HEAD_PACK(attributes, ts, klen)
        crc = _crc32(head)
        p = pos + _HEADER_SIZE
        if key:
            mm[p:p + klen] = key
            crc = _crc32(key, crc)
            p += klen
        mm[p:p + len(value)] = value
        crc = _crc32(value, crc)
        mm[pos + _FRAME_SIZE:pos + _HEADER_SIZE] = head
        rec.FRAME.pack_into(mm, pos, p + len(value) - pos - _FRAME_SIZE, crc)

    def write_chunk(self, values: list, sizes: list[int], crcs, cum: list[int], i: int, j: int,
                    head: bytes, ts: int, now_ns: int) -> None:
        """Records values[i:j] of a batch without keys (crcs[k]: record k's CRC, cum[k]: bytes
        before it), framed in C-level passes (map/join) and copied in one slice assignment; the
        caller checked room."""
        chunk = values[i:j]
        frames = map(_FRAME_PACK, map(_add, sizes[i:j], repeat(_BODY_HEAD_SIZE)), crcs[i:j])
        data = b"".join(chain.from_iterable(zip(frames, repeat(head), chunk)))
        p0 = self.position
        rel0 = self.count
        self.mm[p0:p0 + len(data)] = data
        # Sparse index: the first record starting at or after each INDEX_INTERVAL mark.
        while True:
            k = bisect.bisect_left(cum, self.next_index_at - p0 + cum[i], lo=i, hi=j)
            if k >= j:
                break
            at = p0 + cum[k] - cum[i]
            self.index.add(rel0 + k - i, at)
            self.next_index_at = at + INDEX_INTERVAL
        self._advance(p0 + len(data), j - i, ts, now_ns)

    def write_uniform(self, chunk: list, crcs: bytes, rsize: int, sep: bytearray, ts: int,
                      now_ns: int) -> None:
        """Records of one size `rsize`: frames are periodic, so the chunk is one join with a
        constant frame as separator (`sep`, CRC zero), and the per-record CRCs (`crcs`, packed
        u32s) are dropped in with four strided slice assignments. `chunk` is consumed."""
        k = len(chunk)
        chunk.insert(0, b"")
        data = sep.join(chunk)  # frame, head, value, frame, head, value, ... (CRCs zero)
        for b in range(4):
            data[4 + b::rsize] = crcs[b::4]
        p0 = self.position
        end = p0 + k * rsize
        self.mm[p0:end] = data
        # Sparse index: the first record starting at or after each INDEX_INTERVAL mark.
        while self.next_index_at < end:
            t = max(0, -((p0 - self.next_index_at) // rsize))
            if t >= k:
                break
            at = p0 + t * rsize
            self.index.add(self.count + t, at)
            self.next_index_at = at + INDEX_INTERVAL
        self._advance(end, k, ts, now_ns)

    def append_gap(self, span: int) -> bool:
        """A gap record standing for `span` offsets nobody may be given (recovery: groups
        committed past the end), written and flushed; False when it does not fit."""
        data = rec.encode_gap(span)
        pos = self.position
        if pos + len(data) > self.size:
            return False
        self.mm[pos:pos + len(data)] = data
        if pos >= self.next_index_at:
            self.index.add(self.count, pos)
            self.next_index_at = pos + INDEX_INTERVAL
        self.position = pos + len(data)
        self.count += span
        self.flush()
        return True

    def _advance(self, end: int, records: int, ts: int, now_ns: int) -> None:
        if self.first_ts is None and not self.count:  # after append()s, summary() reads record 0
            self.first_ts = ts
        self.last_ts = ts
        self.last_write_ns = now_ns
        self.position = end
        self.count += records

    # ------------------------------------------------------------------ flushing, sealing
    def flush(self) -> None:
        start = self.flushed_to - self.flushed_to % mmap.PAGESIZE
        if self.position > start:
            self.mm.flush(start, self.position - start)
        self.flushed_to = self.position

    def dirty(self) -> bool:
        return self.position > self.flushed_to

    def summary(self) -> SegmentSummary:
        if self.first_ts is None and self.count:
            # append leaves first_ts to this (one check less per record): record 0 has it.
            first = rec.decode_at(self.mm, 0, self.position)
            while first.status == rec.OK and first.attributes & rec.ATTR_GAP:  # recovery's gap
                first = rec.decode_at(self.mm, first.next_position, self.position)
            if first.status == rec.OK:
                self.first_ts = first.timestamp_ms
        return SegmentSummary(self.position, self.count, self.first_ts or 0, self.last_ts or 0,
                              self.last_write_ns, tuple(self.index.rels),
                              tuple(self.index.positions), base=self.base_offset)

    def seal(self, *, durable: bool, close_mapping: bool = True) -> SegmentSummary:
        """Mark the unused tail, record the summary in the index, set mtime to the last write.
        durable: msync the data, then the index, before returning. close_mapping=False leaves
        `mm` for the caller to close (see `SegmentPreallocator.retire`)."""
        if self.position + rec.LENGTH_SIZE <= self.size:
            rec.LENGTH.pack_into(self.mm, self.position, rec.END_MARKER)
        if durable:
            self.mm.flush()
        summary = self.summary()
        self.index.seal(summary, durable=durable)
        self.index.close()
        if close_mapping:
            self.mm.close()
        os.utime(self.path, ns=(self.last_write_ns, self.last_write_ns), follow_symlinks=False)
        return summary

    def seal_short(self) -> tuple[SegmentSummary, bool]:
        """Seal the segment where its records end and give the unused tail back: the file is cut
        to used_bytes + 4 (its end marker), the shape of a compaction's output, which an open tells
        from a torn file by its index or its data (commitlog.cleanup.swap). The data reaches the
        disk first, whatever the flush mode (a cut file with zeros inside would be torn); then the
        index, sealed and naming the file's inode; then the cut (`cut_short`), unless a reader
        holds the file: returns (summary, cut). An uncut segment is a full-size sealed one, which
        the writer cuts once nobody holds it (commitlog.append.writer) or its next open does
        (commitlog.append.recovery), as after a crash before the cut. The mapping is closed here,
        not in the preallocator's thread: that would prepare the next segment, the disk an idle
        writer gives back."""
        end = self.position + rec.LENGTH_SIZE
        if end > self.size:
            return self.seal(durable=True), True  # full to the last bytes: nothing to give back
        rec.LENGTH.pack_into(self.mm, self.position, rec.END_MARKER)
        self.mm.flush(0, end)  # the records only: the prefaulted rest would be written as zeros
        summary = dataclasses.replace(self.summary(), compacted=True,
                                      data_ino=os.stat(self.path).st_ino & 0xFFFFFFFF)
        self.index.seal(summary, durable=True)
        self.index.close()
        self.mm.close()
        with contextlib.suppress(FileNotFoundError):  # sealed now: a pass may remove it at once
            os.utime(self.path, ns=(self.last_write_ns, self.last_write_ns), follow_symlinks=False)
        return summary, cut_short(self.path, summary)

    def close(self) -> None:
        if not self.mm.closed:
            self.mm.close()
        self.index.close()


def cut_short(path: str, summary: SegmentSummary) -> bool:
    """Cut the sealed segment at `path` that `summary` (its sealed index, compacted) describes to
    its records and end marker, its mtime its last write's, the directory's moved to now
    (`touch_directory`); True when it is cut (or gone, or no longer the file the summary names).
    False, leaving it whole, while anyone holds it: a reader maps a segment at the size it found,
    and a page past a new end of file kills it (SIGBUS) when touched. The exclusive flock taken
    here keeps new holds from mapping the file until it is cut; a file whose end marker is not
    where its index says is left whole (logged)."""
    end = summary.used_bytes + rec.LENGTH_SIZE
    try:
        fd = open_file(path, os.O_RDWR)
    except FileNotFoundError:
        return True
    try:
        st = os.fstat(fd)
        if st.st_ino & 0xFFFFFFFF != summary.data_ino or st.st_size <= end:
            return True
        if not try_exclusive(fd):
            return False
        if rec.LENGTH.unpack(os.pread(fd, rec.LENGTH_SIZE, summary.used_bytes)
                             .ljust(rec.LENGTH_SIZE, b"\0"))[0] != rec.END_MARKER:
            log.warning("left %s whole: no end marker at byte %d, where its index ends it", path,
                        summary.used_bytes)
            return True
        os.ftruncate(fd, end)
        os.fsync(fd)
        os.utime(fd, ns=(summary.last_write_ns, summary.last_write_ns))  # removed meanwhile: ours
    finally:
        os.close(fd)  # and with it the exclusive flock
    touch_directory(os.path.dirname(path))   # a file changed in place: readers keyed by the directory look again
    return True
    def close(self) -> None:
        if not self.mm.closed:
            self.mm.close()
        self.index.close()
