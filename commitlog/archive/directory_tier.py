"""`DirectoryTier`: a directory as an archive tier (`file:///mnt/archive/prefix`; see
`commitlog.archive.tiers`). An object is written to a temporary name, synced, read back and
hashed (and compared with its source), then renamed into place, or, for `create`, hard-linked into
place, which fails when the name is taken: a reader never sees half an object, and one creator
wins. Holds no state: thread-safe, and process-safe as the filesystem is (a hard link is atomic on
local filesystems and NFS).
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import queue
import uuid
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Iterator
from typing import BinaryIO

from ..errors import ArchiveCorruptError, ArchiveError
from ..layout import fsync_directory
from .tiers import CHUNK, HASHING, ObjectInfo, copy_hashing

__all__ = ["DirectoryTier"]

_BACK = 4 << 20                      # bytes read back (and of the source) at a time
_SPARE: queue.SimpleQueue = queue.SimpleQueue()   # buffers of read-backs done (16 MiB a set) ...
_SPARES_KEPT = 4                                   # ... as many sets kept at most
_SYNCING = ThreadPoolExecutor(2, thread_name_prefix="archive-fsync")   # the fsync beside the read-back


class DirectoryTier:
    """A directory as a tier (see the module docstring)."""

    def __init__(self, url: str, root: str) -> None:
        self.url = url
        self.root = root

    def _path(self, key: str) -> str:
        parts = key.split("/")
        if any(p in ("", ".", "..") or "\0" in p for p in parts):    # never a path outside root
            raise ArchiveError(self.url, key, "not a key: an empty, '.' or '..' part, or a NUL")
        return os.path.join(self.root, *parts)

    def _fail(self, key: str | None, exc: Exception) -> ArchiveError:
        return ArchiveError(self.url, key, getattr(exc, "strerror", None) or str(exc))

    def put(self, key: str, source: BinaryIO, size: int) -> ObjectInfo:
        return self._store(key, source, size, _replace)

    def create(self, key: str, data: bytes) -> ObjectInfo | None:
        return self._store(key, io.BytesIO(data), len(data), _link)

    def _store(self, key: str, source: BinaryIO, size: int, place: Callable[[str, str], bool]) -> ObjectInfo | None:
        """Write the object under a temporary name, verified, then `place` it at its key (False:
        the key was taken, nothing stored, None returned)."""
        path = self._path(key)
        tmp = f"{path}.{uuid.uuid4().hex}.part"
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            digest = self._write_verified(key, tmp, source, size)
            if not place(tmp, path):
                return None
            fsync_directory(os.path.dirname(path))
        except (OSError, EOFError) as exc:
            raise self._fail(key, exc) from exc
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return ObjectInfo(key, size, digest)

    def _write_verified(self, key: str, tmp: str, source: BinaryIO, size: int) -> str:
        """Write `size` bytes of `source` to `tmp`, synced and verified; its SHA-256. A source that
        is a file is copied by the kernel, then read back beside the source, compared byte for byte
        and hashed while the fsync runs; any other source (a paced one) is hashed as it is written
        and hashed again as read back."""
        try:
            source_fd = source.fileno()
        except (AttributeError, OSError, io.UnsupportedOperation):
            source_fd = None
        with open(tmp, "x+b") as out:
            if source_fd is None:
                sent = hashlib.sha256()
                copy_hashing(source, size, out.write, sent)
                out.flush()
                os.fsync(out.fileno())
            else:
                start = source.tell()
                _kernel_copy(source_fd, start, out.fileno(), size)
                syncing = _SYNCING.submit(os.fsync, out.fileno())
                try:
                    return self._compared(key, out.fileno(), source_fd, start, size)
                finally:
                    syncing.result()
        back = hashlib.sha256()
        with open(tmp, "rb") as written:
            copy_hashing(written, size, lambda _: None, back)
        if back.hexdigest() != sent.hexdigest():
            raise ArchiveCorruptError(self.url, key, f"read back with SHA-256 "
                                      f"{back.hexdigest()}, written {sent.hexdigest()}")
        return sent.hexdigest()

    def _compared(self, key: str, stored_fd: int, source_fd: int, start: int, size: int) -> str:
        """The SHA-256 of the `size` bytes of `stored_fd`, read back and compared with the source's
        from byte `start` of `source_fd` (ArchiveCorruptError at the first that differs). Hashed in
        another thread while the next part is read (two pairs of buffers, taken in turn)."""
        digest = hashlib.sha256()
        try:
            pairs = _SPARE.get_nowait()        # buffers used before: fresh memory is slow to touch
        except queue.Empty:
            pairs = [(bytearray(_BACK), bytearray(_BACK)) for _ in range(2)]
        pending, done, turn = None, 0, 0
        try:
            while done < size:
                n = min(_BACK, size - done)
                stored, sent = pairs[turn]
                if os.preadv(stored_fd, [memoryview(stored)[:n]], done) != n \
                        or os.preadv(source_fd, [memoryview(sent)[:n]], start + done) != n:
                    raise ArchiveCorruptError(self.url, key, f"read back short at byte {done} of {size}")
                if (stored != sent) if n == _BACK else (stored[:n] != sent[:n]):
                    raise ArchiveCorruptError(self.url, key, f"read back other bytes than the source's "
                                              f"in [{done}, {done + n})")
                if pending is not None:
                    pending.result()
                pending = HASHING.submit(digest.update, memoryview(stored)[:n])
                done, turn = done + n, 1 - turn
        finally:
            if pending is not None:
                pending.result()
            if _SPARE.qsize() < _SPARES_KEPT:
                _SPARE.put(pairs)
        return digest.hexdigest()

    def read_range(self, key: str, start: int, length: int) -> bytes:
        try:
            with open(self._path(key), "rb") as f:
                return os.pread(f.fileno(), length, start)
        except OSError as exc:
            raise self._fail(key, exc) from exc

    def read(self, key: str) -> bytes | None:
        try:
            with open(self._path(key), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._fail(key, exc) from exc

    def head(self, key: str) -> ObjectInfo | None:
        """A directory stores no checksum: the object is hashed, read a chunk at a time."""
        digest, size = hashlib.sha256(), 0
        try:
            with open(self._path(key), "rb") as f:
                while chunk := f.read(CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._fail(key, exc) from exc
        return ObjectInfo(key, size, digest.hexdigest())

    def size(self, key: str) -> int | None:
        try:
            return os.stat(self._path(key)).st_size
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._fail(key, exc) from exc

    def delete(self, key: str) -> None:
        try:
            os.unlink(self._path(key))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise self._fail(key, exc) from exc

    def keys(self, prefix: str = "") -> Iterator[str]:
        top = self._path(prefix.rstrip("/")) if prefix.rstrip("/") else self.root
        for folder, _, files in os.walk(top):
            rel = os.path.relpath(folder, self.root)
            for name in sorted(files):
                if not name.endswith(".part"):
                    yield name if rel == "." else f"{rel.replace(os.sep, '/')}/{name}"


def _kernel_copy(source_fd: int, start: int, out_fd: int, size: int) -> None:
    """`size` bytes of `source_fd` from byte `start` to `out_fd` by the kernel (copy_file_range,
    else sendfile); EOFError when the source ends first."""
    done = 0
    while done < size:
        try:
            n = os.copy_file_range(source_fd, out_fd, size - done, start + done)
        except OSError as exc:                       # across filesystems on older kernels, or none
            if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                raise
            n = os.sendfile(out_fd, source_fd, start + done, size - done)
        if n == 0:
            raise EOFError(f"the source ended {size - done} bytes early")
        done += n


def _replace(tmp: str, path: str) -> bool:
    os.replace(tmp, path)
    return True


def _link(tmp: str, path: str) -> bool:
    """Create-exclusive: a hard link fails with EEXIST when the key is taken (one creator wins)."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    return True
