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
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor, wait
from collections.abc import Callable, Iterator
from typing import BinaryIO

from ..errors import ArchiveCorruptError, ArchiveError
from ..layout import fsync_directory
from .tiers import CHUNK, HASHING, ObjectInfo, copy_hashing

__all__ = ["DirectoryTier"]

_BACK = 1 << 20                      # bytes copied, read back and hashed at a time (cache-sized)
_SPARE: queue.SimpleQueue = queue.SimpleQueue()   # buffers of read-backs done (4 MiB a set) ...
_SPARES_KEPT = 4                                   # ... as many sets kept at most
_SYNCING = ThreadPoolExecutor(2, thread_name_prefix="archive-copy")    # the copy and fsync beside the read-back


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
                return self._copied(key, source_fd, source.tell(), out.fileno(), size)
        back = hashlib.sha256()
        with open(tmp, "rb") as written:
            copy_hashing(written, size, lambda _: None, back)
        if back.hexdigest() != sent.hexdigest():
            raise ArchiveCorruptError(self.url, key, f"read back with SHA-256 "
                                      f"{back.hexdigest()}, written {sent.hexdigest()}")
        return sent.hexdigest()

    def _copied(self, key: str, source_fd: int, start: int, out_fd: int, size: int) -> str:
        """Copy `size` bytes of `source_fd` from byte `start` to `out_fd`, synced; the SHA-256 of
        what was stored. Three things run at once: the kernel's copy, part by part, then the fsync
        (one thread); the hash of each part of the source as read (another); and here, the
        read-back of each part once copied, compared byte for byte with the very bytes hashed
        (ArchiveCorruptError at the first that differs), so the digest is of bytes proven stored."""
        parts = [(at, min(_BACK, size - at)) for at in range(0, size, _BACK)]
        copied = [threading.Event() for _ in parts]

        # The job's own descriptors: whatever the caller closes (a second Ctrl-C in its wait),
        # the job never reads or writes another file that took a closed descriptor's number.
        job_source, job_out = os.dup(source_fd), os.dup(out_fd)

        def copy_then_sync() -> None:
            try:
                try:
                    for (at, n), done in zip(parts, copied):
                        if (got := _kernel_copy(job_source, start + at, job_out, n)) < n:
                            raise EOFError(f"the source ended {size - at - got} bytes early")
                        done.set()
                finally:
                    for done in copied:    # a failed copy wakes the read-back, which meets its error
                        done.set()
                os.fsync(job_out)
            finally:
                os.close(job_source)
                os.close(job_out)

        try:
            job = _SYNCING.submit(copy_then_sync)
        except BaseException:
            os.close(job_source)
            os.close(job_out)
            raise
        try:
            digest = self._compared(key, out_fd, source_fd, start, parts, copied)
        except ArchiveCorruptError as mismatch:
            if (failure := job.exception()) is not None:    # a read-back cut short by a failed copy
                raise failure from mismatch
            raise
        finally:
            wait([job])            # the temporary file is not removed under the copy
        job.result()
        return digest

    def _compared(self, key: str, stored_fd: int, source_fd: int, start: int,
                  parts: list[tuple[int, int]], copied: list[threading.Event]) -> str:
        """The SHA-256 of the source's `parts` (from byte `start` of `source_fd`), each hashed in
        another thread as soon as read and compared with the stored copy's once `copied` says it
        is there (two pairs of buffers, taken in turn)."""
        digest = hashlib.sha256()
        try:
            pairs = _SPARE.get_nowait()        # buffers used before: fresh memory is slow to touch
        except queue.Empty:
            pairs = [(bytearray(_BACK), bytearray(_BACK)) for _ in range(2)]
        pending = None
        try:
            for k, (at, n) in enumerate(parts):
                stored, sent = pairs[k % 2]    # `sent` was last hashed two parts ago: waited for
                if os.preadv(source_fd, [memoryview(sent)[:n]], start + at) != n:
                    raise ArchiveCorruptError(self.url, key, f"the source ended before byte {at + n}")
                if pending is not None:
                    pending.result()
                pending = HASHING.submit(digest.update, memoryview(sent)[:n])
                copied[k].wait()
                if os.preadv(stored_fd, [memoryview(stored)[:n]], at) != n:
                    raise ArchiveCorruptError(self.url, key, f"read back short at byte {at} of {at + n}")
                if (stored != sent) if n == _BACK else (stored[:n] != sent[:n]):
                    raise ArchiveCorruptError(self.url, key, f"read back other bytes than the source's "
                                              f"in [{at}, {at + n})")
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


def _kernel_copy(source_fd: int, start: int, out_fd: int, size: int) -> int:
    """Copy `size` bytes of `source_fd` from byte `start` to `out_fd` by the kernel
    (copy_file_range, else sendfile); the bytes copied, fewer when the source ends first."""
    done = 0
    while done < size:
        try:
            n = os.copy_file_range(source_fd, out_fd, size - done, start + done)
        except OSError as exc:                       # across filesystems on older kernels, or none
            if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                raise
            n = os.sendfile(out_fd, source_fd, start + done, size - done)
        if n == 0:
            break
        done += n
    return done


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
