"""Segment files: naming, allocation, and the writer's view of the active segment.

A segment is a fixed-size file named by the 20-digit, zero-padded logical offset of its first
record (`00000000000000000000.log`). Its size is reserved up front with posix_fallocate, because
writing through a mapping of a sparse file on a full disk kills the process with SIGBUS.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import struct
import threading
import time
from dataclasses import dataclass

from . import record as rec
from .errors import StoreFullError
from .index import INDEX_INTERVAL, IndexWriter, SegmentSummary, index_file_size, index_path

SEGMENT_SUFFIX = ".log"
DELETED_SUFFIX = ".deleted"
PREALLOC_NAME = ".next-segment.prealloc"
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


def _allocate(path: str, size: int, *, exclusive: bool) -> int:
    """Create `path` with `size` bytes really reserved; ENOSPC becomes StoreFullError."""
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | (os.O_EXCL if exclusive else 0)
    fd = os.open(path, flags, 0o644)
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        os.close(fd)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise StoreFullError(f"no space left to allocate {size} bytes for {path}") from exc
        raise
    return fd


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
            fd = _allocate(path, size, exclusive=True)
        try:
            ifd = _allocate(ipath, index_file_size(size), exclusive=False)
            os.close(ifd)
            index = IndexWriter(ipath, size, [], [])
        except BaseException:
            if mapping is not None:
                mapping.close()
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
        `mm` for the caller to close (see `close_later`)."""
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


def close_later(mapping: mmap.mmap) -> None:
    """Unmap a big mapping in a background thread: munmap of a 64 MiB segment with every page
    mapped takes a few milliseconds, and mmap.close releases the GIL, so the writer need not
    wait for it. Small ones are closed at once (a thread costs more than their munmap)."""
    if len(mapping) < _CLOSE_LATER_FROM:
        mapping.close()
        return
    threading.Thread(target=mapping.close, name="commitlog-unmap", daemon=True).start()


_CLOSE_LATER_FROM = 8 << 20


@dataclass
class PreparedSegment:
    path: str
    fd: int
    mapping: mmap.mmap


_MADV_POPULATE_WRITE = 23  # Linux 5.14+; Python 3.11's mmap module does not name it
_PREFAULT_STEP = 2 << 20
_madvise = None


def prefault_writable(mapping: mmap.mmap, size: int) -> bool:
    """Fault every page of a shared mapping in, writable, as if written (MADV_POPULATE_WRITE),
    through ctypes so the GIL is released meanwhile. False where the kernel cannot (older than
    5.14): pages then fault on first write, as without it. MAP_POPULATE is no substitute: it
    maps shared pages read-only (each first write still faults) and holds the GIL throughout."""
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
                if _madvise(address + start, min(_PREFAULT_STEP, size - start),
                            _MADV_POPULATE_WRITE) != 0:
                    return False
            return True
        finally:
            del view  # the export would keep the mapping from closing
    except (ImportError, OSError, AttributeError, TypeError, ValueError):
        return False


class SegmentPreallocator:
    """Prepares the next segment in a background thread: created, reserved with posix_fallocate,
    mapped and its pages faulted in writable (`prefault_writable`), so that a roll is a rename
    and appends do not pay a page fault per 4 KiB (RocketMQ's AllocateMappedFileService and its
    warm-up do the same). Used by the single writer; `request` and `take` are thread-safe."""

    def __init__(self, directory: str, size: int) -> None:
        self.path = os.path.join(directory, PREALLOC_NAME)
        self.size = size
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._ready: PreparedSegment | None = None

    def request(self) -> None:
        with self._lock:
            if self._thread is not None or self._ready is not None:
                return
            self._thread = threading.Thread(target=self._prepare, name="commitlog-prealloc",
                                            daemon=True)
            self._thread.start()

    def _prepare(self) -> None:
        prepared = None
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path + STALE_SUFFIX)
            fd = _allocate(self.path, self.size, exclusive=False)
            try:
                mapping = mmap.mmap(fd, self.size)
                prefault_writable(mapping, self.size)
                prepared = PreparedSegment(self.path, fd, mapping)
            except BaseException:
                os.close(fd)
                raise
        except (OSError, StoreFullError):
            pass  # no room now: the roll allocates synchronously and reports StoreFullError
        finally:
            with self._lock:
                self._ready = prepared
                self._thread = None

    def take(self) -> PreparedSegment | None:
        """The prepared segment (waiting for one in progress), or None."""
        thread = self._thread
        if thread is not None:
            thread.join()
        with self._lock:
            prepared, self._ready = self._ready, None
        return prepared

    def discard_leftover(self) -> None:
        """Set aside a prepared file a crash left (it is not trusted) with a rename; the next
        preparation unlinks it in the background (dropping 64 MiB of page cache takes a while)."""
        with contextlib.suppress(FileNotFoundError):
            os.rename(self.path, self.path + STALE_SUFFIX)

    def discard(self) -> None:
        prepared = self.take()
        if prepared is not None:
            prepared.mapping.close()
            os.close(prepared.fd)
        for path in (self.path, self.path + STALE_SUFFIX):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
