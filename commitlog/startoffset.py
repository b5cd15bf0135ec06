"""The log's start offset in `<log>/start.offset`, a small file written in place, so that head
removal works on a full disk (why, and the slot format: docs, Concepts, "The start offset file").

Two checksummed slots in 8 KiB of written zeros; an advance overwrites the older slot and
fdatasyncs; the newer valid slot wins, a torn one loses to the other. Logs from before this file:
`state.db`'s `start_offset` row is read too (the start offset is the max of both) and copied into
the file when it is created; from then on the file is authoritative. Only retention (head removal)
advances it; a compaction records the head it drops in `compacted` (commitlog.gaps) instead.

Thread- and process-safe: advances serialise on an flock of the file; a reader that meets a slot
being written sees a CRC failure there and takes the other, older slot, and a process never sees
its value go back (it keeps the highest it read).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import struct
import threading
import zlib

from .errors import CorruptLogError
from .layout import TMP_SUFFIX, fsync_directory
from .safeopen import open_file, temporary

_SLOT = struct.Struct(">4sQQI")          # magic, sequence number, offset, CRC32 of the first three
_MAGIC = b"CLSO"
_SLOT_SPACING = 4096                      # one slot per page: a torn page write spoils one slot only
FILE_SIZE = 2 * _SLOT_SPACING
_FULL = (errno.ENOSPC, errno.EDQUOT)
_NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


def _slot_position(seq: int) -> int:
    return (seq % 2) * _SLOT_SPACING  # alternate: the slot written last is never overwritten


def encode_slot(seq: int, offset: int) -> bytes:
    head = _SLOT.pack(_MAGIC, seq, offset, 0)[:-4]
    return head + struct.pack(">I", zlib.crc32(head))


def decode_slot(raw: bytes) -> tuple[int, int] | None:
    """(sequence, offset) of a valid slot; None for a torn, zeroed or foreign one."""
    if len(raw) != _SLOT.size:
        return None
    magic, seq, offset, crc = _SLOT.unpack(raw)
    if magic != _MAGIC or crc != zlib.crc32(raw[:-4]):
        return None
    return seq, offset


class StartOffsetFile:
    """An open `start.offset` (see the module docstring). `open` returns None when the file does
    not exist; `create` writes one. Thread-safe; process-safe."""

    def __init__(self, path: str, fd: int, *, writable: bool = True) -> None:
        self.path = path
        self._fd = fd
        self._writable = writable
        self._retired: list[int] = []
        self._lock = threading.Lock()
        self._raw: tuple[bytes, bytes] | None = None
        self._seq = 0
        self._offset = 0
        self._read()  # a damaged file is reported at open, not at the first removal

    @classmethod
    def open(cls, path: str) -> "StartOffsetFile | None":
        try:
            fd = open_file(path, os.O_RDWR)
            writable = True
        except FileNotFoundError:
            return None
        except OSError as exc:      # a read-only mount (EROFS) or no write permission: read it
            if exc.errno not in _NOT_WRITABLE:
                raise
            fd = open_file(path, os.O_RDONLY)
            writable = False
        try:
            size = os.fstat(fd).st_size
            if size != FILE_SIZE:
                raise CorruptLogError(path, None, f"start offset file is {size} bytes, expected {FILE_SIZE}")
            return cls(path, fd, writable=writable)
        except BaseException:
            os.close(fd)
            raise

    @classmethod
    def create(cls, path: str, offset: int) -> "StartOffsetFile | None":
        """Write the file holding `offset` (temporary, fsync, rename, fsync the directory); None
        when the disk has no room for its 8 KiB (the caller keeps the previous way)."""
        tmp = path + TMP_SUFFIX
        try:
            fd = temporary(tmp, os.O_RDWR)
            try:
                data = bytearray(FILE_SIZE)
                pos = _slot_position(1)
                data[pos:pos + _SLOT.size] = encode_slot(1, offset)
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, path)
            fsync_directory(os.path.dirname(path))
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if exc.errno in _FULL:
                return None
            raise
        return cls.open(path)

    def _read(self) -> int:
        fd = self._fd
        raw = (os.pread(fd, _SLOT.size, 0), os.pread(fd, _SLOT.size, _SLOT_SPACING))
        if raw == self._raw:
            return self._offset
        slots = [s for s in map(decode_slot, raw) if s is not None]
        if not slots:
            raise CorruptLogError(self.path, None, "start offset file has no valid slot "
                                  "(both fail their checksum)")
        seq, offset = max(slots)
        with self._lock:
            if seq >= self._seq:
                self._raw, self._seq = raw, seq
                self._offset = max(self._offset, offset)
            return self._offset

    def value(self) -> int:
        return self._read()

    def advance(self, offset: int) -> None:
        """Move the start offset forward to `offset` (never back), durably, allocating nothing."""
        if not self._writable:
            self._reopen_writable()
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            current = self._read()
            if offset <= current:
                return
            seq = self._seq + 1
            os.pwrite(self._fd, encode_slot(seq, offset), _slot_position(seq))
            os.fdatasync(self._fd)
            self._read()
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _reopen_writable(self) -> None:
        # Opened where it could not be written (a read-only mount since remounted, say): the
        # OSError of a still read-only one is the caller's to translate.
        fd = open_file(self.path, os.O_RDWR)
        with self._lock:   # the old descriptor closes with the file: a reader may be using it
            self._retired.append(self._fd)
            self._fd, self._writable = fd, True

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            for fd in self._retired:
                os.close(fd)
            self._retired.clear()
