"""`DirectoryTier`: a directory as an archive tier (`file:///mnt/archive/prefix`; see
`commitlog.archive.tiers`). An object is written to a temporary name, synced, read back and hashed,
then renamed into place, or, for `create`, hard-linked into place, which fails when the name is
taken: a reader never sees half an object, and one creator wins. Holds no state: thread-safe, and
process-safe as the filesystem is (a hard link is atomic on local filesystems and NFS).
"""

from __future__ import annotations

import hashlib
import io
import os
import uuid
from collections.abc import Callable, Iterator
from typing import BinaryIO

from ..errors import ArchiveCorruptError, ArchiveError
from ..layout import fsync_directory
from .tiers import CHUNK, ObjectInfo, copy_hashing

__all__ = ["DirectoryTier"]


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
        """Write `size` bytes of `source` to `tmp`, synced, read back and compared; its SHA-256."""
        sent, back = hashlib.sha256(), hashlib.sha256()
        with open(tmp, "xb") as out:
            copy_hashing(source, size, out.write, sent)
            out.flush()
            os.fsync(out.fileno())
        with open(tmp, "rb") as written:
            copy_hashing(written, size, lambda _: None, back)
        if back.hexdigest() != sent.hexdigest():
            raise ArchiveCorruptError(self.url, key, f"read back with SHA-256 "
                                      f"{back.hexdigest()}, written {sent.hexdigest()}")
        return sent.hexdigest()

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
