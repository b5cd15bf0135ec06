"""A host's copies of a cluster log's tier objects: the log's local directory as a cache of its
tier (commitlog.layout: `cluster-cache.json`, `cache/<key>`, `cache/<key>.tmp`).

    mark(directory, url, endpoint, region, name)  make `directory` a cache of log `name` on the
                                      tier at `url` (creating it, its marker written once); False
                                      when it is a log of its own (meta.json) or cannot be made
    read_marker(directory)            the marker (CacheMarker), None without one; CorruptLogError
                                      naming the file when it is not one
    workspace(directory, key)         a fresh directory `cache/<key>.tmp` (a task's private log
                                      while it stages: the same filesystem as its copies)
    keep_file(directory, key, path, size)   move a finished file, cut at `size`, to `cache/<key>`
    keep_bytes(directory, key, data)  write `data` to `cache/<key>.tmp`, then rename it there
    valid_copy(directory, key, size, sha256)  the copy's path when it is whole and its SHA-256
                                      matches; a copy that differs is removed, never an error
    CachedTier(tier, directory, name) the tier, its reads of the log's listed objects served from
                                      valid copies (the newest manifest version's sizes and
                                      SHA-256s), every other call the tier's

No credential is written: the marker names the tier, its endpoint and region only. Every file and
directory below the log's directory is created without following a symbolic link
(commitlog.safeopen); the directory's own path may be one. Thread- and process-safe: copies are
renamed into place whole, and a copy's bytes are checked whole before any is served.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
from dataclasses import asdict, dataclass

from ..errors import CorruptLogError, InvalidArgumentError, UnsafeLogFileError
from ..layout import CLUSTER_CACHE_DIR, TMP_SUFFIX, cached_object_path, cluster_cache_file, meta_path
from ..safeopen import no_follow, temporary
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
        _subdirs(directory, [CLUSTER_CACHE_DIR])
        if _marker_or_none(directory) == marker:
            return True
        path = cluster_cache_file(directory)
        with open(path + TMP_SUFFIX, "w", opener=temporary) as out:
            json.dump({"format": MARKER_FORMAT, **asdict(marker)}, out, sort_keys=True)
        os.replace(path + TMP_SUFFIX, path)
        return True
    except (OSError, UnsafeLogFileError, CorruptLogError):
        return False


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
    try:
        path = cached_object_path(directory, key)
        with open(path, "rb", opener=no_follow) as f:
            found = os.fstat(f.fileno())
            good = stat.S_ISREG(found.st_mode) and found.st_size == size \
                and hashlib.file_digest(f, "sha256").hexdigest() == sha256
    except (OSError, InvalidArgumentError, UnsafeLogFileError):
        return None
    if not good:
        try:
            os.unlink(path)
        except OSError:
            pass
        return None
    return path


class CachedTier:
    """See the module docstring. Thread-safe (a lock over what it learnt)."""

    def __init__(self, tier: Tier, directory: str, name: str) -> None:
        self.tier = tier
        self.url = tier.url
        self.directory = directory
        self.name = name
        self.served: set[str] = set()         # keys read from a copy at least once
        self._lock = threading.Lock()
        self._listed: dict[str, tuple[int, str]] | None = None
        self._copies: dict[str, str | None] = {}

    def __getattr__(self, attribute: str):
        return getattr(self.tier, attribute)

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

    def _copy(self, key: str) -> tuple[str, int, str] | None:
        """The valid copy of tier object `key`, its size and SHA-256; None: read the tier."""
        if not key.startswith(self.name + "/"):
            return None
        relative = key[len(self.name) + 1:]
        with self._lock:
            known = relative in self._copies
            path = self._copies.get(relative)
        if not known:
            path = None
            if os.path.lexists(os.path.join(self.directory, CLUSTER_CACHE_DIR, *relative.split("/"))):
                expected = self._listing().get(relative)
                path = valid_copy(self.directory, relative, *expected) if expected else None
            with self._lock:
                self._copies[relative] = path
        if path is None:
            return None
        size, sha = self._listing()[relative]
        return path, size, sha

    def _local(self, key: str, start: int, length: int | None) -> bytes | None:
        found = self._copy(key)
        if found is None:
            return None
        try:
            with open(found[0], "rb", opener=no_follow) as f:
                data = os.pread(f.fileno(), found[1] - start if length is None else length, start)
        except OSError:                                  # evicted meanwhile: the tier has it
            with self._lock:
                self._copies[key[len(self.name) + 1:]] = None
            return None
        with self._lock:
            self.served.add(key)
        return data

    def size(self, key: str) -> int | None:
        found = self._copy(key)
        return found[1] if found is not None else self.tier.size(key)

    def head(self, key: str) -> ObjectInfo | None:
        found = self._copy(key)
        return ObjectInfo(key, found[1], found[2]) if found is not None else self.tier.head(key)

    def read_range(self, key: str, start: int, length: int) -> bytes:
        data = self._local(key, start, length)
        return data if data is not None else self.tier.read_range(key, start, length)

    def read(self, key: str) -> bytes | None:
        data = self._local(key, 0, None)
        return data if data is not None else self.tier.read(key)
