"""File locks: the single-writer lock of a log and the shared holds readers take on segments.

A segment being read is held with a shared `flock` on its file, so any process (the sidecar too)
can tell it is in use by trying an exclusive, non-blocking lock. Within a process, holds on the
same segment share one descriptor and count references (flock locks belong to the open file
description, so a second descriptor would not add anything but cost).
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import threading
import time
from dataclasses import dataclass

from .errors import LogLockedError, LogNotWritableError
from .layout import lock_path
from .safeopen import open_file


ROLLING = "rolling"          # the note of a holder that only seals an idle log's segment
ROLLING_WAIT = 5.0           # seconds a writer waits for such a holder before giving up


class WriterLock:
    """The exclusive lock on `<log>/.lock` that makes a process the log's only writer. `note`
    says why it is held; a writer that finds it held by a time-based roll of an idle log
    (commitlog.timeroll, milliseconds) waits up to ROLLING_WAIT seconds for it."""

    def __init__(self, directory: str, *, note: str = "") -> None:
        self.path = lock_path(directory)
        deadline = time.monotonic() + ROLLING_WAIT
        while True:
            try:
                fd, holder = try_pid_lock(self.path, note)
            except OSError as exc:
                if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                    raise LogNotWritableError(directory, os.strerror(exc.errno).lower()) from exc
                raise
            if fd is not None:
                break
            if note or holder is None or holder[1] != ROLLING or time.monotonic() >= deadline:
                raise LogLockedError(directory, holder[0] if holder else None)
            time.sleep(0.005)
        self._fd = fd

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def try_pid_lock(path: str, note: str = "") -> tuple[int | None, tuple[int | None, str] | None]:
    """Open (creating) `path`, take its exclusive flock without waiting and write this process's
    pid (and `note`) in it: `(fd, None)`; `(None, (holder's pid or None, its note))` when another
    open file holds it. The lock lasts until `fd` is closed (or the process dies). OSError when
    `path` cannot be opened."""
    fd = open_file(path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_holder(fd)
        os.close(fd)
        return None, holder
    # A fixed-width record, so no truncate: on ext4 that can wait for a journal commit. The pid
    # only informs: on a full disk the lock holds without it.
    try:
        os.pwrite(fd, f"{f'{os.getpid()} {note}':<20}\n".encode(), 0)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            os.close(fd)
            raise
    return fd, None


def writer_holder(directory: str) -> tuple[int | None, str] | None:
    """(pid or None, note) of the process holding the writer lock of the log `directory`, None when
    none does. Creates and writes nothing: a reader's question, on a read-only mount too."""
    fd = hold_writer_lock(directory)
    if isinstance(fd, int):
        os.close(fd)
        return None
    return fd


def hold_writer_lock(directory: str) -> int | tuple[int | None, str] | None:
    """Take the writer lock's flock through a read-only descriptor, creating and writing nothing:
    the descriptor (the lock lasts until it is closed: no writer opens meanwhile), or the holder's
    (pid or None, note) when a writer holds it. None when the log has no lock file (no writer
    ever opened it; nothing can be held)."""
    try:
        fd = open_file(lock_path(directory), os.O_RDONLY)
    except FileNotFoundError:
        return None
    if try_exclusive(fd):
        return fd
    holder = _read_holder(fd)
    os.close(fd)
    return holder


def _read_holder(fd: int) -> tuple[int | None, str]:
    try:
        words = os.pread(fd, 32, 0).decode().split()
        return (int(words[0]) or None) if words else None, " ".join(words[1:])
    except (ValueError, OSError, UnicodeDecodeError):
        return None, ""


def try_exclusive(fd: int) -> bool:
    """Take an exclusive flock without waiting; False when someone holds the file."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


@dataclass
class _Hold:
    fd: int
    mm: mmap.mmap | None
    refs: int


class SegmentHolds:
    """In-process registry of held segments: one descriptor, one shared flock, one read-only
    mapping per segment, reference counted. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holds: dict[str, _Hold] = {}
        self._unclosed: list[mmap.mmap] = []

    def acquire(self, path: str) -> tuple[int, mmap.mmap | None]:
        """Hold `path` and return (fd, mapping). Raises FileNotFoundError when it is gone."""
        with self._lock:
            hold = self._holds.get(path)
            if hold is not None:
                hold.refs += 1
                return hold.fd, hold.mm
        fd = open_file(path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            # The remover may have renamed the file between our open and our lock.
            if os.fstat(fd).st_ino != os.stat(path, follow_symlinks=False).st_ino:
                raise FileNotFoundError(path)
            size = os.fstat(fd).st_size
            mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ) if size else None
        except BaseException:
            os.close(fd)
            raise
        with self._lock:
            hold = self._holds.get(path)
            if hold is not None:  # another thread won the race; use its hold
                hold.refs += 1
                racer = (fd, mm)
            else:
                self._holds[path] = _Hold(fd, mm, 1)
                return fd, mm
        if racer[1] is not None:
            racer[1].close()
        os.close(racer[0])
        return hold.fd, hold.mm

    def release(self, path: str) -> None:
        with self._lock:
            hold = self._holds.get(path)
            if hold is None:
                return
            hold.refs -= 1
            if hold.refs > 0:
                return
            del self._holds[path]
            self._close_mapping(hold.mm)
            os.close(hold.fd)

    def _close_mapping(self, mm: mmap.mmap | None) -> None:
        # A zero-copy view still exported keeps the mapping open; close it once the view is gone.
        still = []
        for m in self._unclosed + ([mm] if mm is not None else []):
            try:
                m.close()
            except BufferError:
                still.append(m)
        self._unclosed = still

    def held(self, path: str) -> bool:
        with self._lock:
            return path in self._holds

    def close_all(self) -> None:
        with self._lock:
            holds, self._holds = list(self._holds.values()), {}
            for hold in holds:
                self._close_mapping(hold.mm)
                os.close(hold.fd)
