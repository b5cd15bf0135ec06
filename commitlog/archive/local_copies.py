"""A host's copies of a cluster log's tier objects: the log's local directory as a cache of its
tier (commitlog.layout: `cluster-cache.json`, `cache/<key>`, `cache/<key>.tmp`).

    mark(directory, url, endpoint, region, name)  make `directory` a cache of log `name` on the tier
        at `url` (its marker written once); False when it is a log of its own or cannot be made
    read_marker(directory)   the CacheMarker, None without one; CorruptLogError naming a bad file,
        UnsafeLogFileError for no regular file (never opened through)
    workspace(directory, key)  a fresh `cache/<key>.tmp` directory (a task's private log)
    keep_file / keep_bytes     a finished file (cut at `size`) or bytes, renamed to `cache/<key>`
    valid_copy(directory, key, size, sha256)  the copy's path when whole and matching; a copy
        that differs is removed, never an error
    CachedTier(tier, directory, name)  the tier; reads of the objects the newest manifest version
        lists served from valid copies, every other call the tier's

No credential is written; nothing below the directory is created through a symlink. Thread- and
process-safe: copies are renamed into place whole and served only from a descriptor checked whole
(docs, Spark on a cluster, "Local copies and where tasks run").
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import stat
import threading
import weakref
from dataclasses import asdict, dataclass

from ..errors import CorruptLogError, InvalidArgumentError, UnsafeLogFileError
from ..layout import CLUSTER_CACHE_DIR, TMP_SUFFIX, cached_object_path, cluster_cache_file, meta_path
from ..safeopen import no_follow, open_file, temporary
from .tiers import ObjectInfo, Tier
from . import versions

MARKER_FORMAT = 1


@dataclass(frozen=True)
class CacheMarker:
    """What `cluster-cache.json` says: the tier the copies come from and the log's name on it."""

    url: str
    endpoint: str | None
    region: str | None
    log: str


def mark(directory: str, url: str, endpoint: str | None, region: str | None, name: str) -> bool:
    """Make `directory` a cache of log `name` on `url` (see the module docstring)."""
    marker = CacheMarker(url, endpoint, region, name)
    try:
        os.makedirs(directory, exist_ok=True)
        if os.path.lexists(meta_path(directory)):
            return False
        with _exclusive(_subdirs(directory, [CLUSTER_CACHE_DIR])):
            if _marker_or_none(directory) == marker:
                return True
            path = cluster_cache_file(directory)
            with open(path + TMP_SUFFIX, "w", opener=temporary) as out:
                json.dump({"format": MARKER_FORMAT, **asdict(marker)}, out, sort_keys=True)
            os.replace(path + TMP_SUFFIX, path)
        return True
    except (OSError, UnsafeLogFileError, CorruptLogError):
        return False


@contextlib.contextmanager
def _exclusive(folder: str):
    """An exclusive flock on the directory `folder` itself (never through a link): the tasks of
    one host marking the same directory at once take turns at the marker's one temporary file
    (else one's rename takes the other's file away and that task keeps no copies)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def read_marker(directory: str) -> CacheMarker | None:
    path = cluster_cache_file(directory)
    try:
        with open(path, "rb", opener=no_follow) as f:
            body = json.loads(f.read())
        found = CacheMarker(body["url"], body.get("endpoint"), body.get("region"), body["log"])
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptLogError(path, None, f"not a cluster cache marker ({type(exc).__name__})") from None
    if not all(isinstance(v, str) for v in (found.url, found.log)):
        raise CorruptLogError(path, None, "not a cluster cache marker (url and log are strings)")
    return found


def _marker_or_none(directory: str) -> CacheMarker | None:
    try:
        return read_marker(directory)
    except CorruptLogError:
        return None


def _subdirs(directory: str, parts: list[str]) -> str:
    """`directory`/parts..., each created if missing; one that is not a directory (a link) is refused."""
    path = directory
    for part in parts:
        path = os.path.join(path, part)
        try:
            os.mkdir(path)
        except FileExistsError:
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                raise UnsafeLogFileError(path, "not a directory") from None
    return path


def _parent(directory: str, key: str) -> str:
    """The directory of `cache/<key>`, created; InvalidArgumentError for a key that is no path."""
    cached_object_path(directory, key)
    return _subdirs(directory, [CLUSTER_CACHE_DIR, *key.split("/")[:-1]])


def workspace(directory: str, key: str) -> str:
    path = os.path.join(_parent(directory, key), key.split("/")[-1] + TMP_SUFFIX)
    os.mkdir(path)
    return path


def keep_file(directory: str, key: str, path: str, size: int) -> str:
    """`path` (a regular file of ours on the cache's filesystem) cut at `size`, renamed to `cache/<key>`."""
    target = os.path.join(_parent(directory, key), key.split("/")[-1])
    os.truncate(path, size)
    os.rename(path, target)
    return target


def keep_bytes(directory: str, key: str, data: bytes) -> str:
    target = os.path.join(_parent(directory, key), key.split("/")[-1])
    with open(target + TMP_SUFFIX, "wb", opener=temporary) as out:
        out.write(data)
    os.replace(target + TMP_SUFFIX, target)
    return target


def valid_copy(directory: str, key: str, size: int, sha256: str) -> str | None:
    """See the module docstring; None when there is no copy, or it was removed for differing."""
    fd = _verified(directory, key, size, sha256)
    if fd is None:
        return None
    os.close(fd)
    return cached_object_path(directory, key)


def _verified(directory: str, key: str, size: int, sha256: str) -> int | None:
    """A read-only descriptor of the copy `cache/<key>` whose bytes were just checked whole (the
    size and SHA-256); None when there is none (not a regular file: refused unopened and left), or
    it differed (removed). Whoever serves the copy reads this descriptor, never the path again:
    a file renamed over the copy afterwards is not what was checked."""
    try:
        path = cached_object_path(directory, key)
        fd = open_file(path, os.O_RDONLY)
    except (OSError, InvalidArgumentError, UnsafeLogFileError):
        return None
    try:
        with os.fdopen(os.dup(fd), "rb") as f:
            good = os.fstat(fd).st_size == size \
                and hashlib.file_digest(f, "sha256").hexdigest() == sha256
    except OSError:
        good = False
    if good:
        return fd
    os.close(fd)
    try:
        os.unlink(path)
    except OSError:
        pass
    return None


class _Copy:
    """A checked copy: its descriptor (the bytes checked), their size and SHA-256, and the file's
    status when checked (a change since, written in place, is not served)."""

    def __init__(self, fd: int, size: int, sha256: str) -> None:
        self.fd = fd
        self.size = size
        self.sha256 = sha256
        self.status = _status(fd)


def _status(fd: int) -> tuple[int, int, int, int]:
    st = os.fstat(fd)
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _close_all(copies: dict) -> None:
    for copy in copies.values():
        if copy is not None:
            os.close(copy.fd)
    copies.clear()


class CachedTier:
    """See the module docstring. Thread-safe (a lock over what it learnt). Each copy is checked
    once and served from the descriptor that was checked; at most KEPT descriptors stay open (the
    least recently used closed, checked again when next read), all closed by close() or when the
    object is collected."""

    KEPT = 32

    def __init__(self, tier: Tier, directory: str, name: str) -> None:
        self.tier = tier
        self.url = tier.url
        self.directory = directory
        self.name = name
        self.served: set[str] = set()         # keys read from a copy at least once
        self._lock = threading.Lock()
        self._listed: dict[str, tuple[int, str]] | None = None
        self._copies: dict[str, _Copy | None] = {}
        self._finalizer = weakref.finalize(self, _close_all, self._copies)

    def __getattr__(self, attribute: str):
        return getattr(self.tier, attribute)

    def close(self) -> None:
        """Close the copies' descriptors (and the tier, when it has a close())."""
        with self._lock:
            self._finalizer()
        closing = getattr(self.tier, "close", None)
        if closing is not None:
            closing()

    def _listing(self) -> dict[str, tuple[int, str]]:
        with self._lock:
            if self._listed is not None:
                return self._listed
        found = versions.newest(self.tier, self.name)
        listed: dict[str, tuple[int, str]] = {}
        for s in found[1].segments if found is not None else ():
            listed[s.data_file] = (s.bytes, s.sha256)
            listed[s.index_file] = (s.index_bytes, s.index_sha256)
        with self._lock:
            self._listed = listed
        return listed

    def _copy(self, key: str) -> tuple[int, int, str] | None:
        """A new descriptor (the caller closes it) of the checked copy of tier object `key`, its
        size and SHA-256; None: read the tier."""
        if not key.startswith(self.name + "/"):
            return None
        relative = key[len(self.name) + 1:]
        with self._lock:
            known = relative in self._copies
            if known:
                copy = self._copies.pop(relative)
                self._copies[relative] = copy            # the most recently used last
                if copy is not None:
                    return os.dup(copy.fd), copy.size, copy.sha256
                return None
        copy = None
        if os.path.lexists(os.path.join(self.directory, CLUSTER_CACHE_DIR, *relative.split("/"))):
            expected = self._listing().get(relative)
            fd = _verified(self.directory, relative, *expected) if expected else None
            copy = _Copy(fd, *expected) if fd is not None else None
        with self._lock:
            old = self._copies.pop(relative, None)
            if old is not None:
                os.close(old.fd)
            self._copies[relative] = copy
            while sum(c is not None for c in self._copies.values()) > self.KEPT:
                oldest = next(k for k, c in self._copies.items() if c is not None)
                os.close(self._copies.pop(oldest).fd)   # checked again when next read
            return (os.dup(copy.fd), copy.size, copy.sha256) if copy is not None else None

    def _forget(self, relative: str) -> None:
        with self._lock:
            copy = self._copies.pop(relative, None)
            if copy is not None:
                os.close(copy.fd)

    def _local(self, key: str, start: int, length: int | None) -> bytes | None:
        found = self._copy(key)
        if found is None:
            return None
        fd, size, _ = found
        relative = key[len(self.name) + 1:]
        try:
            with self._lock:
                copy = self._copies.get(relative)
                status = copy.status if copy is not None else None
            want = max(0, size - start if length is None else min(length, size - start))
            data = os.pread(fd, want, start)
            if status is None or _status(fd) != status or len(data) != want:
                self._forget(relative)                  # changed since it was checked: the tier
                return None
        except OSError:
            self._forget(relative)
            return None
        finally:
            os.close(fd)
        with self._lock:
            self.served.add(key)
        return data

    def size(self, key: str) -> int | None:
        found = self._copy(key)
        if found is None:
            return self.tier.size(key)
        os.close(found[0])
        return found[1]

    def head(self, key: str) -> ObjectInfo | None:
        found = self._copy(key)
        if found is None:
            return self.tier.head(key)
        os.close(found[0])
        return ObjectInfo(key, found[1], found[2])

    def read_range(self, key: str, start: int, length: int) -> bytes:
        data = self._local(key, start, length)
        return data if data is not None else self.tier.read_range(key, start, length)

    def read(self, key: str) -> bytes | None:
        data = self._local(key, 0, None)
        return data if data is not None else self.tier.read(key)
