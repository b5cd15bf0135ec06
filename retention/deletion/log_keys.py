"""A log's key: what of its directory and the files written in place a change-driven pass compares
(`unchanged`, and compaction's `look_memory`): the directory's inode, mode and owner, its entries
listed again only when its times moved (`Listing`), and the files written in place (`key_paths`),
with git's racily clean rule (`RACY_NS`). Operations, "Change-driven passes", has the table of
inputs. `LogKeys` is not thread-safe (one per memory); the functions are.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from commitlog.layout import (COMPACT_LOCK_FILE, DATABASE_FILES, LOCK_FILE, REMOVE_LOCK_FILE, RETENTION_LOCK_FILE,
                              SPARK_TURN_FILE, marks_path, state_path)

__all__ = ["RACY_NS", "Listing", "LogKeys", "files_key", "key_paths"]

RACY_NS = 2_000_000_000       # an mtime this close to the moment it was read is not trusted


def key_paths(path: str) -> tuple[str, ...]:
    """The log directory `path` and its files written in place (`start.offset` moves only with a
    removal, which renames a segment)."""
    state = state_path(path)
    return path, state, state + "-wal", marks_path(path)


# SQLite's companions come and go with its connections (the sidecar's own reads among them), an
# empty -wal is no commit: neither is a change of what the log holds.
_CONNECTION_FILES = frozenset(name + suffix for name in DATABASE_FILES
                              for suffix in ("-wal", "-shm", "-journal"))
# flock files, their pid written again at each acquire (the sidecar's own claim among them): their
# (name, inode) only.
_LOCK_FILES = frozenset((LOCK_FILE, REMOVE_LOCK_FILE, COMPACT_LOCK_FILE, RETENTION_LOCK_FILE, SPARK_TURN_FILE))


class Listing:
    """A directory's entries (name, inode, size, mtime_ns, ctime_ns), less SQLite's companions, kept
    as a hash (an int, not 25 tuples a log: 10,000 logs); a lock file's times are left out (a pid
    written at each acquire). Listed whole again when the directory's (mtime_ns, ctime_ns) moved or
    were racily recent when listed; while they stand, only the entries that were racily recent at
    the listing (a busy log's active segment) are looked at again, each by a stat, and each is
    trusted as the others are once it settles (100,000 stats a pass for a busy log of 100,000
    segments, before). An entry's ctime tells a file unlinked and created again at its inode (ext4
    reuses one at once) from the old."""

    __slots__ = ("times", "entries", "_settled", "_racy")

    def __init__(self) -> None:
        self.times: tuple | None = None     # the directory's, when listed and not racily recent
        self.entries: int | None = None
        self._settled: int | None = None    # `_summed` of the entries settled
        self._racy: tuple[str, ...] = ()    # the names of the others

    def read(self, path: str, st: os.stat_result, now_ns: int) -> int:
        times = (st.st_mtime_ns, st.st_ctime_ns)
        if times != self.times or self.entries is None:
            self._list(path, times, now_ns)
        elif self._racy:
            settled, racy = _split([_entry_at(path, name) for name in self._racy], now_ns)
            if settled:                     # those settled now are trusted from here on, each alone
                self._settled = _summed(settled, self._settled)
                self._racy = tuple(e[0] for e in racy)
            self.entries = _summed(racy, self._settled)
        return self.entries

    def _list(self, path: str, times: tuple, now_ns: int) -> None:
        with os.scandir(path) as listing:
            entries = [_entry(e) for e in listing if e.name not in _CONNECTION_FILES]
        settled, racy = _split(entries, now_ns)
        self._settled = _summed(settled)
        self._racy = tuple(e[0] for e in racy)
        self.entries = _summed(racy, self._settled)
        # a change in the same tick would go unseen: the names are listed again until it settles
        self.times = times if now_ns - max(times) >= RACY_NS else None


def _summed(entries: list[tuple], start: int = 0) -> int:
    """`start` plus the entries' hashes, modulo 2**64: the same for the same entries however they
    were split between a listing and the stats after it (a frozenset's hash is not)."""
    return (start + sum(map(hash, entries))) & 0xFFFF_FFFF_FFFF_FFFF


def _split(entries: list[tuple], now_ns: int) -> tuple[list[tuple], list[tuple]]:
    """(the entries settled at `now_ns`, the racily recent ones: times within RACY_NS)."""
    settled: list[tuple] = []
    racy: list[tuple] = []
    for e in entries:
        (racy if e[3] is not None and now_ns - max(e[3], e[4]) < RACY_NS else settled).append(e)
    return settled, racy


def _entry_at(path: str, name: str) -> tuple:
    """`_entry` of the entry `name` of directory `path`, by a stat of its own."""
    try:
        st = os.stat(os.path.join(path, name), follow_symlinks=False)
    except FileNotFoundError:       # gone since the listing: the directory moved, listed again next pass
        return name, None, None, None, None
    return name, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _entry(e: os.DirEntry) -> tuple:
    if e.name in _LOCK_FILES:
        return e.name, e.inode(), None, None, None
    try:
        st = e.stat(follow_symlinks=False)
    except FileNotFoundError:       # gone since the scan: the directory moved, listed again next pass
        return e.name, e.inode(), None, None, None
    return e.name, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def files_key(paths: tuple[str, ...], listing: Listing, now_ns: int) -> tuple[int, tuple | None] | None:
    """(the directory's device, the key of its entries and in-place files: see the module
    docstring) of `key_paths`; None when the directory cannot be read, and no key when an in-place
    file's mtime is within `RACY_NS` of `now_ns`."""
    try:
        st = os.stat(paths[0])
        key: list = [st.st_ino, st.st_mode, st.st_uid, st.st_gid, listing.read(paths[0], st, now_ns)]
    except OSError:
        return None
    for name in paths[1:]:
        # ctime too, but not the -wal's: SQLite run as root chowns it on opening (the pass's own read).
        wal = name.endswith("-wal")
        try:
            f = os.stat(name)
        except FileNotFoundError:
            key.append(None)
            continue
        except OSError:
            return st.st_dev, None
        ctime = 0 if wal else f.st_ctime_ns      # moved by a write whose mtime was put back (os.utime)
        if now_ns - max(f.st_mtime_ns, ctime) < RACY_NS:
            return st.st_dev, None
        key.append((f.st_ino, f.st_size, f.st_mtime_ns, ctime) if f.st_size else None)   # an empty -wal: none
    return st.st_dev, tuple(key)


class LogKeys:
    """Per log name, its `key_paths` (with `extra(path)`'s files) and its `Listing`, made again
    when the log's path changes: `take` gives its `files_key` now. Not thread-safe (one per memory)."""

    def __init__(self, extra: Callable[[str], tuple[str, ...]] = lambda path: ()) -> None:
        self._extra = extra
        self._paths: dict[str, tuple[tuple[str, ...], Listing]] = {}

    def take(self, name: str, path: str, now_ns: int) -> tuple[int, tuple | None] | None:
        paths = self._paths.get(name)
        if paths is None or paths[0][0] != path:
            paths = self._paths[name] = (key_paths(path) + self._extra(path), Listing())
        return files_key(*paths, now_ns)

    def keep_only(self, names: set[str]) -> None:
        for name in [n for n in self._paths if n not in names]:
            del self._paths[name]
