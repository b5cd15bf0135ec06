"""The preallocator: next segments prepared ahead in a background thread, so a roll is two renames.

Each prepared segment is created, reserved with posix_fallocate (a full disk is reported there, never
as a SIGBUS later), mapped and faulted in writable, with its index reserved and mapped beside it.
Prepared files are hidden (`.prepared-segment-N.*`, see commitlog.layout) and count as used disk,
so a segment is prepared ahead only while reserving it keeps the disk at or below the writer's
refuse_writes_ratio (`may_reserve`), and what was prepared is released when the writer is refused.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import threading
from collections import deque
from dataclasses import dataclass
from typing import Callable

from ..errors import StoreFullError, UnsafeLogFileError
from .index import index_file_size
from ..layout import INDEX_SUFFIX, PREALLOC_PREFIX, SEGMENT_SUFFIX, STALE_SUFFIX, prepared_stem
from .reserve import allocate_file


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
    `retire`, `take`, `release_ready` and `discard` are thread-safe.

    may_reserve(nbytes): asked before each reservation; False (the disk would cross the writer's
    refuse_writes_ratio) leaves the segment unprepared, and the roll that needs it allocates it
    itself, once the disk guard let the writer through."""

    MAX_AHEAD = 2

    def __init__(self, directory: str, size: int,
                 may_reserve: Callable[[int], bool] | None = None) -> None:
        self.directory = directory
        self.size = size
        self._may_reserve = may_reserve
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
                prepared = self._prepare(prepared_stem(self.directory, slot))
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
        path, ipath = stem + SEGMENT_SUFFIX, stem + INDEX_SUFFIX
        index_size = index_file_size(self.size)
        if self._may_reserve is not None and not self._may_reserve(self.size + index_size):
            return None  # above the line once reserved: the roll that needs it allocates it
        try:
            fd = allocate_file(path, self.size, exclusive=False)
        except (OSError, StoreFullError, UnsafeLogFileError):
            # No room now (or a link planted at the name, set aside at the next open): the roll
            # allocates synchronously and reports StoreFullError.
            return None
        mapping = None
        try:
            mapping = mmap.mmap(fd, self.size)
            prefault_writable(mapping, self.size, lambda: self._closing)
            ifd = allocate_file(ipath, index_size, exclusive=False)
            try:
                index_mapping = mmap.mmap(ifd, index_size)
            finally:
                os.close(ifd)
            return PreparedSegment(path, fd, mapping, ipath, index_mapping)
        except (OSError, StoreFullError, UnsafeLogFileError):
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

    def release_ready(self) -> int:
        """Remove the segments prepared but not taken (the writer is refused: they hold disk
        it may not use); returns how many. A preparation under way finishes and is kept."""
        with self._cond:
            ready, self._ready = list(self._ready), deque()
        for prepared in ready:
            prepared.close()
            for path in (prepared.path, prepared.index_path):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
        return len(ready)

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
