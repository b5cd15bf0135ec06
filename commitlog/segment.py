"""Segment files: naming, allocation, and the writer's view of the active segment.

A segment is a fixed-size file named by the 20-digit, zero-padded logical offset of its first
record (`00000000000000000000.log`). Its size is reserved up front with posix_fallocate, because
writing through a mapping of a sparse file on a full disk kills the process with SIGBUS.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

from . import record as rec
from .errors import StoreFullError
from .reserve import allocate_file
from .index import INDEX_INTERVAL, IndexWriter, SegmentSummary, index_file_size, index_path

SEGMENT_SUFFIX = ".log"
DELETED_SUFFIX = ".deleted"
PREALLOC_PREFIX = ".prepared-segment-"  # then a number and .log or .index
STALE_SUFFIX = ".stale"
_END = struct.Struct("<I")


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}{SEGMENT_SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    """The base offset a segment file name encodes, or None for any other name."""
    # Plain string checks: a directory listing of 100,000 segments parses every name each pass.
    if len(name) == 24 and name.endswith(SEGMENT_SUFFIX) and name[:20].isdigit() and name[:20].isascii():
        return int(name[:20])
    return None


@dataclass(frozen=True)
class SegmentInfo:
    """A segment as `CommitLog.segments()` describes it. Immutable."""

    base_offset: int
    path: str
    size: int
    used_bytes: int
    first_timestamp_ms: int | None
    last_timestamp_ms: int | None
    mtime: float
    active: bool
    record_count: int = 0

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.record_count


def fsync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ActiveSegment:
    """The segment being written. Owned by the writer; callers serialise access (the log's lock)."""

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

    @classmethod
    def create(cls, directory: str, base_offset: int, size: int,
               prepared: "PreparedSegment | None" = None, *, durable: bool = True) -> "ActiveSegment":
        """Create the segment starting at `base_offset`, from a prepared file when there is one.
        durable: fsync the directory so the new name survives a power loss."""
        path = os.path.join(directory, segment_name(base_offset))
        ipath = index_path(path)
        mapping = None
        if prepared is not None:
            os.rename(prepared.path, path)
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
        except BaseException:
            if prepared is not None:
                prepared.close()
            else:
                os.close(fd)
            os.unlink(path)
            raise
        if durable:
            fsync_directory(directory)
        return cls(base_offset, path, size, fd, index, mapping=mapping)

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.count

    def write_large(self, value, key: bytes | None, ts: int, attributes: int) -> None:
        """Write one big record piece by piece, frame last, without joining it in memory first."""
        pos = self.position
        klen = -1 if key is None else len(key)
        head = rec.BODY_HEAD.pack(attributes, ts, klen)
        crc = rec.crc32(head)
        p = pos + rec.HEADER_SIZE
        if key:
            self.mm[p:p + klen] = key
            crc = rec.crc32(key, crc)
            p += klen
        self.mm[p:p + len(value)] = value
        crc = rec.crc32(value, crc)
        self.mm[pos + 8:pos + rec.HEADER_SIZE] = head
        end = p + len(value)
        rec.FRAME.pack_into(self.mm, pos, end - pos - 8, crc)
        self._advance(end, 1, ts, ts)

    def _advance(self, end: int, records: int, first_ts: int, last_ts: int) -> None:
        if self.first_ts is None:
            self.first_ts = first_ts
        self.last_ts = last_ts
        self.last_write_ns = time.time_ns()
        self.position = end
        self.count += records

    def flush(self) -> None:
        start = self.flushed_to - self.flushed_to % mmap.PAGESIZE
        if self.position > start:
            self.mm.flush(start, self.position - start)
        self.flushed_to = self.position

    def summary(self) -> SegmentSummary:
        if self.first_ts is None and self.count:
            # append leaves first_ts to this (one check less per record): record 0 has it.
            first = rec.decode_at(self.mm, 0, self.position)
            if first.status == rec.OK:
                self.first_ts = first.timestamp_ms
        return SegmentSummary(self.position, self.count, self.first_ts or 0, self.last_ts or 0,
                              self.last_write_ns, tuple(self.index.rels),
                              tuple(self.index.positions))

    def seal(self, *, durable: bool, close_mapping: bool = True) -> SegmentSummary:
        """Mark the unused tail, record the summary in the index, set mtime to the last write.
        durable: msync the data, then the index, before returning. close_mapping=False leaves
        `mm` for the caller to close (see `SegmentPreallocator.retire`)."""
        if self.position + _END.size <= self.size:
            _END.pack_into(self.mm, self.position, rec.END_MARKER)
        if durable:
            self.mm.flush()
        summary = self.summary()
        self.index.seal(summary, durable=durable)
        self.index.close()
        if close_mapping:
            self.mm.close()
        os.utime(self.path, ns=(self.last_write_ns, self.last_write_ns))
        return summary

    def close(self) -> None:
        if not self.mm.closed:
            self.mm.close()
        self.index.close()


@dataclass
class PreparedSegment:
    path: str
    fd: int
    mapping: mmap.mmap
    index_path: str  # reserved at the index's size, reading as zeros
    index_mapping: mmap.mmap

    def close(self) -> None:
        self.mapping.close()
        self.index_mapping.close()
        os.close(self.fd)


_MADV_POPULATE_WRITE = 23  # Linux 5.14+; Python 3.11's mmap module does not name it
_PREFAULT_STEP = 2 << 20
_madvise = None


def prefault_writable(mapping: mmap.mmap, size: int,
                      cancelled: Callable[[], bool] = lambda: False) -> bool:
    """Fault every page of a shared mapping in, writable, as if written (MADV_POPULATE_WRITE),
    through ctypes so the GIL is released meanwhile. False where the kernel cannot (older than
    5.14): pages then fault on first write, as without it. MAP_POPULATE is no substitute: it
    maps shared pages read-only (each first write still faults) and holds the GIL throughout.
    `cancelled` is asked between steps of a few megabytes; once it says so, the rest is left."""
    global _madvise
    try:
        import ctypes
        if _madvise is None:
            fn = ctypes.CDLL(None, use_errno=True).madvise
            fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
            fn.restype = ctypes.c_int
            _madvise = fn
        view = (ctypes.c_char * size).from_buffer(mapping)
        try:
            address = ctypes.addressof(view)
            # In steps: the kernel holds the process's mmap lock while populating, and the
            # writer's own mmap, munmap and page faults must not wait for a whole segment.
            for start in range(0, size, _PREFAULT_STEP):
                if cancelled():
                    return False
                if _madvise(address + start, min(_PREFAULT_STEP, size - start),
                            _MADV_POPULATE_WRITE) != 0:
                    return False
            return True
        finally:
            del view  # the export would keep the mapping from closing
    except (ImportError, OSError, AttributeError, TypeError, ValueError):
        return False


class SegmentPreallocator:
    """Prepares next segments in a background thread: each created, reserved with
    posix_fallocate, mapped and its pages faulted in writable (`prefault_writable`), with its
    index reserved and mapped beside it, so that a roll is two renames and appends do not pay a
    page fault per 4 KiB. One segment is kept ready; two once the writer has had to wait for one
    (RocketMQ's AllocateMappedFileService keeps two). The same thread unmaps the mappings of
    sealed segments (`retire`): munmap of a 64 MiB segment takes milliseconds, and every mmap
    and munmap in the process waits for the others. Used by the single writer; `request`,
    `retire`, `take` and `discard` are thread-safe."""

    MAX_AHEAD = 2

    def __init__(self, directory: str, size: int) -> None:
        self.directory = directory
        self.size = size
        self._cond = threading.Condition()
        self._worker: threading.Thread | None = None
        self._ready: deque[PreparedSegment] = deque()
        self._retired: list[mmap.mmap] = []
        self._ahead = 1
        self._closing = False
        self._next_slot = 0
        self._taken = 0
        self._stale: list[str] = []  # set aside by discard_leftover, unlinked by the worker

    def request(self) -> None:
        """Start preparing in the background unless enough is ready or under way."""
        with self._cond:
            if len(self._ready) < self._ahead or self._retired:
                self._start()

    def retire(self, mapping: mmap.mmap) -> None:
        """Close a sealed segment's mapping in the background."""
        with self._cond:
            self._retired.append(mapping)
            self._start()

    def _start(self) -> None:
        if self._worker is None and not self._closing:
            self._worker = threading.Thread(target=self._work, name="commitlog-prealloc",
                                            daemon=True)
            self._worker.start()

    def _work(self) -> None:
        try:
            self._remove_stale()
            while True:
                with self._cond:
                    retired, self._retired = self._retired, []
                    if not retired:
                        if self._closing or len(self._ready) >= self._ahead:
                            return
                        slot, self._next_slot = self._next_slot, self._next_slot + 1
                if retired:
                    for mapping in retired:
                        mapping.close()
                    continue
                prepared = self._prepare(os.path.join(self.directory, f"{PREALLOC_PREFIX}{slot}"))
                if prepared is None:
                    return
                with self._cond:
                    self._ready.append(prepared)
                    self._cond.notify_all()
        finally:
            with self._cond:
                self._worker = None
                self._cond.notify_all()

    def _prepare(self, stem: str) -> "PreparedSegment | None":
        path, ipath = stem + SEGMENT_SUFFIX, stem + ".index"
        try:
            fd = allocate_file(path, self.size, exclusive=False)
        except (OSError, StoreFullError):
            return None  # no room now: the roll allocates synchronously and reports StoreFullError
        mapping = None
        try:
            mapping = mmap.mmap(fd, self.size)
            prefault_writable(mapping, self.size, lambda: self._closing)
            index_size = index_file_size(self.size)
            ifd = allocate_file(ipath, index_size, exclusive=False)
            try:
                index_mapping = mmap.mmap(ifd, index_size)
            finally:
                os.close(ifd)
            return PreparedSegment(path, fd, mapping, ipath, index_mapping)
        except (OSError, StoreFullError):
            if mapping is not None:
                mapping.close()
            os.close(fd)
            for leftover in (path, ipath):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(leftover)
            return None

    def take(self) -> "PreparedSegment | None":
        """The oldest prepared segment (waiting for one in progress), or None."""
        with self._cond:
            if not self._ready and self._worker is not None:
                if self._taken:  # a full segment waits (a new log's first one always would)
                    self._ahead = self.MAX_AHEAD  # the writer outruns the preparation
                while not self._ready and self._worker is not None:
                    self._cond.wait()
            self._taken += 1
            return self._ready.popleft() if self._ready else None

    def wait_idle(self) -> None:
        """Wait until the background work asked for so far is done."""
        with self._cond:
            while self._worker is not None:
                self._cond.wait()

    def discard_leftover(self) -> None:
        """Set aside prepared files a crash left (they are not trusted) with a rename; the next
        preparation unlinks them in the background (dropping 64 MiB of page cache takes a while)."""
        for path in self._own_files():
            stale = path if path.endswith(STALE_SUFFIX) else path + STALE_SUFFIX
            if stale != path:
                with contextlib.suppress(FileNotFoundError):
                    os.rename(path, stale)
            self._stale.append(stale)

    def _own_files(self) -> list[str]:
        with os.scandir(self.directory) as it:
            return [e.path for e in it if e.name.startswith(PREALLOC_PREFIX)]

    def _remove_stale(self) -> None:
        with self._cond:
            stale, self._stale = self._stale, []
        for path in stale:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def discard(self) -> None:
        """Stop preparing and remove what was prepared (the writer is closing)."""
        with self._cond:
            self._closing = True
            while self._worker is not None:
                self._cond.wait()
            ready, self._ready = list(self._ready), deque()
            retired, self._retired = self._retired, []
        for mapping in retired:
            mapping.close()
        for prepared in ready:
            prepared.close()
        for path in self._own_files():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
