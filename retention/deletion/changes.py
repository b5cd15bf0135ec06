"""Dirty marks: what inotify says may have changed in a log directory, so that a change-driven pass
(`.unchanged`) takes a log's key again only for a log that may have changed.

A log directory with a working watch (`retention.scheduling.rollwatch` adds it and says so, with
the (device, inode) it is on) is marked clean when a pass is about to take its key; any event on
the directory or a file in it marks it dirty again. While it stays clean, the pass compares the key
it remembers (taken when the log was last planned) instead of taking it again: the four `stat`s of
its key and the two of its claim. A log without a working watch (none added, its watch gone or
`stale`, or a filesystem whose changes inotify may not see: `TRUSTED_FILESYSTEMS`) is never clean:
keyed by `stat`s every pass. A clean log's key is taken anyway at most `FULL_CHECK` seconds after
the last (from half of it, by the path: `stagger` spreads many logs over the passes), the
safety net for a change no event reported (a write through a hard link in another directory, a
parent directory renamed: `seen` then finds another directory at the path than the watch's, and
the watch is added again). A missed change can only delay a deletion: a carried plan deletes
nothing, and a disk's triggers are asked every pass. A mount change and an overflowed event queue
mark every log dirty. Each reader of the marks (`Reader`: the deletion passes, the compaction
passes) has clean marks of its own: one pass taking a key marks the directory clean for itself
only. Thread-safe: the watch's thread marks, passes ask.
"""

from __future__ import annotations

import enum
import threading
import time
import zlib
from collections.abc import Callable

__all__ = ["COMPACTION_FULL_CHECK", "FULL_CHECK", "TRUSTED_FILESYSTEMS", "ChangeMarks", "Reader"]

FULL_CHECK = 300.0   # seconds: a clean log's key is taken again at least this often, events or none
# The compaction passes' safety net: what it misses only delays a compaction (a pressure
# compaction looks at every log whatever the marks), and the job runs every `compaction.interval`.
COMPACTION_FULL_CHECK = 3600.0


class Reader(enum.Enum):
    """Who asks the marks: each has clean marks and a safety-net period of its own."""
    DELETION = "deletion"
    COMPACTION = "compaction"

    @property
    def full_check(self) -> float:
        return FULL_CHECK if self is Reader.DELETION else COMPACTION_FULL_CHECK

# statfs f_type of the filesystems whose every change a local inotify watch sees: ext2/3/4, xfs,
# btrfs, tmpfs, f2fs, zfs, overlayfs (its writes go through the mount; its lower layers are an
# image's, unchanging). Not NFS, CIFS, FUSE, Ceph and the like: another host's writes raise no event.
TRUSTED_FILESYSTEMS = frozenset((0xEF53, 0x58465342, 0x9123683E, 0x01021994, 0xF2F52010, 0x2FC12FC1, 0x794C7630))


def stagger(path: str, period: float, share: float = 0.5) -> float:
    """How long before now a clean mark of `path` is dated: up to `share` of `period`, fixed by the
    path, so that many logs' safety-net keys fall in different passes, not all in one. A mark dated
    earlier is keyed sooner: each key is taken again at most `period` after the last."""
    return period * share * zlib.crc32(path.encode("utf-8", "surrogateescape")) / 2**32


class ChangeMarks:
    """Per log directory: whether it is watched, and since when (monotonic) it is clean."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._watched: dict[str, tuple[int, int]] = {}   # directory -> (st_dev, st_ino) its watch is on
        # reader -> directory -> when it was marked clean for that reader (its key taken)
        self._clean: dict[Reader, dict[str, float]] = {reader: {} for reader in Reader}
        self._stale: set[str] = set()          # watched directories whose path names another inode now

    def fresh(self, path: str, reader: Reader = Reader.DELETION) -> bool:
        """True: `path` is watched and no event came since `reader` last took its key, less than
        `reader.full_check` ago (its remembered key stands). False: take its key again; a watched
        `path` is marked clean for `reader` now, before the key is read, so an event during the
        reading leaves it dirty."""
        now = self._clock()
        clean = self._clean[reader]
        with self._lock:
            since = clean.get(path)
            if since is not None and now - since < reader.full_check:
                return True
            if path in self._watched:
                clean[path] = now - stagger(path, reader.full_check)
            return False

    def clean(self, reader: Reader = Reader.DELETION) -> tuple[float, dict[str, float]]:
        """(now, a copy of every path's clean mark for `reader`): a pass over many logs asks once,
        taking the lock once. A path whose mark is later than `now - reader.full_check` was fresh
        at `now`; any other is asked again with `fresh` (which marks it clean)."""
        now = self._clock()
        with self._lock:
            return now, self._clean[reader].copy()

    def since(self, path: str, reader: Reader) -> float | None:
        """When `path` was last marked clean for `reader` (monotonic s), None when dirty since: a
        remembered key stands only under the clean mark it was taken under, not under one another
        log's key taken at that path made since (a reload gave it the path)."""
        with self._lock:
            return self._clean[reader].get(path)

    def _forget(self, path: str) -> None:
        for clean in self._clean.values():
            clean.pop(path, None)

    def watched(self, path: str, inode: tuple[int, int]) -> None:
        """`path` has a working watch on directory `inode` (st_dev, st_ino) from now on (dirty until
        its key is next taken)."""
        with self._lock:
            self._watched[path] = inode
            self._forget(path)
            self._stale.discard(path)

    def seen(self, path: str, dev: int, ino: int) -> None:
        """A pass's key found directory (`dev`, `ino`) at `path`: when its watch is on another (a
        parent renamed, a mount put over it or taken away, raise no event on the watched one), it
        is unwatched from now on and `stale` until the roll watch watches the path again."""
        with self._lock:
            inode = self._watched.get(path)
            if inode is not None and inode != (dev, ino):
                del self._watched[path]
                self._forget(path)
                self._stale.add(path)

    def stale(self) -> set[str]:
        """The paths `seen` found another directory at, not watched again yet."""
        with self._lock:
            return set(self._stale)

    def unwatched(self, path: str) -> None:
        """`path` has no working watch: keyed by `stat`s every pass."""
        with self._lock:
            self._watched.pop(path, None)
            self._forget(path)
            self._stale.discard(path)

    def dirty(self, paths: set[str]) -> None:
        """An event came for each of `paths`."""
        with self._lock:
            for path in paths:
                self._forget(path)

    def all_dirty(self) -> None:
        """Events were lost (the queue overflowed): any log may have changed."""
        with self._lock:
            for clean in self._clean.values():
                clean.clear()

    def is_watched(self, path: str) -> bool:
        with self._lock:
            return path in self._watched
