"""The roll watch: a disk check the moment a writer prepares or rolls a segment, not a second later.

A writer prepares its next segment as a hidden file in the log directory and reserves its whole size
with posix_fallocate: that is when used disk jumps. inotify tells this process when a file is
created, renamed into or closed after writing in a watched log directory; the watch then checks that
filesystem at once and every `HOT_POLL` seconds for `HOT_WINDOW` seconds. Events on the small files
that opening or claiming a log writes (`QUIET`) start no check (a first pass over 10,000 logs writes
them in every directory). inotify is reached through ctypes (libc), no new dependency; where it is
unavailable (not Linux, the per-user watch limit reached) one WARNING line says so and the periodic
disk check alone acts on pressure.

It also marks log directories dirty for change-driven passes (`retention.deletion.changes`): any
event in one, `QUIET` names included, but a SQLite connection's own (`_changes_contents`); a lost
queue marks every directory dirty; a watch gone (directory removed, moved, unmounted) or `stale` (a
pass found another directory at its path) leaves its directory unwatched until `retry()` watches
the path again; a path naming a directory watched for another path (a link) is not watched (one
watch an inode). docs: operations.md, "Change-driven passes".

Thread-safe: `sync()` and `close()` may be called from any thread; the callback runs on the watch's
own thread, at most once per filesystem per `DEBOUNCE` seconds.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import select
import struct
import threading
import time
from collections.abc import Callable

from loguru import logger

from commitlog.layout import DATABASE_FILES, RETENTION_LOCK_FILE, START_OFFSET_FILE, STATE_FILE
from policies import plural

from ..deletion.changes import TRUSTED_FILESYSTEMS, ChangeMarks

__all__ = ["DEBOUNCE", "HOT_POLL", "HOT_WINDOW", "QUIET", "RollWatch"]

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
_ROLL = IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE          # the events that start a disk check
_MASK = (_ROLL | IN_MODIFY | IN_ATTRIB | IN_MOVED_FROM | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF
         | IN_ONLYDIR)                                     # IN_UNMOUNT, IN_IGNORED, IN_Q_OVERFLOW come unasked
_GONE = IN_MOVE_SELF | IN_IGNORED                          # the watch no longer watches its path
_EVENT = struct.Struct("iIII")   # wd, mask, cookie, len; then len bytes of name

DEBOUNCE = 0.005     # seconds: events closer than this make one check
HOT_POLL = 0.02      # seconds between two checks while a filesystem is hot
HOT_WINDOW = 0.25    # seconds a filesystem stays hot after an event (fallocate follows the create)
QUIET = frozenset(os.fsencode(name) for name in (STATE_FILE, STATE_FILE + "-wal", STATE_FILE + "-shm",
                                                 START_OFFSET_FILE, RETENTION_LOCK_FILE))


# SQLite's companions, and the events on them that change nothing the database holds: a
# connection's open makes, chowns and closes a -wal (empty) and a -shm, its last close removes
# them, and the -shm is an index of the -wal, written at every open. A -wal written, renamed or
# removed (its frames lost unless a checkpoint wrote them to the database: a write of the
# database itself) is a change, and so is one that comes into being holding frames (a link).
_SHM = frozenset(os.fsencode(name + "-shm") for name in DATABASE_FILES)
_WAL = frozenset(os.fsencode(name + "-wal") for name in DATABASE_FILES)
_WAL_CHANGES = IN_MODIFY | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE


def _changes_contents(path: str, name: bytes, mask: int) -> bool:
    """Whether event `mask` on `name` in directory `path` may change what the log holds (every
    event does, but those on a database's connection files listed above)."""
    if name in _SHM:
        return False
    if name not in _WAL or mask & _WAL_CHANGES:
        return True
    if not mask & IN_CREATE:
        return False
    try:
        return os.lstat(os.path.join(os.fsencode(path), name)).st_size != 0
    except FileNotFoundError:
        return False
    except OSError:
        return True


def _libc():
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name or "libc.so.6", use_errno=True)
    libc.inotify_init1.argtypes = [ctypes.c_int]
    libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.statfs.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    return libc


def _inode(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _trusted(libc, path: bytes) -> bool:
    """Whether `path`'s filesystem is one whose changes a local watch sees (`TRUSTED_FILESYSTEMS`):
    statfs's f_type, the struct's first field (a C long)."""
    buf = ctypes.create_string_buffer(256)
    if libc.statfs(path, buf) != 0:
        return False
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF in TRUSTED_FILESYSTEMS


class RollWatch:
    """Watches log directories and calls `on_change(dev)` when a filesystem should be checked now.

    paths: {directory: dev}. A directory that does not exist yet is retried at each `sync()`.
    `marks`: the dirty marks its events set (`marks` attribute; a new one when not given)."""

    def __init__(self, on_change: Callable[[int], object], marks: ChangeMarks | None = None) -> None:
        self._on_change = on_change
        self.marks = marks if marks is not None else ChangeMarks()
        self._lock = threading.Lock()
        self._wds: dict[int, int] = {}        # watch descriptor -> dev
        self._dirs: dict[int, str] = {}       # watch descriptor -> directory
        self._watched: dict[str, int] = {}    # directory -> watch descriptor
        self._wanted: dict[str, int] = {}
        self._told: dict[str, int] = {}       # directory -> the errno its last failed watch was said with
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._fd = -1
        self._wake: tuple[int, int] | None = None      # (read end, write end)
        self._libc = None
        self.available = False
        self.checks = 0
        try:
            if not hasattr(select, "poll"):
                raise OSError(errno.ENOSYS, "no poll()")
            self._libc = _libc()
            fd = self._libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
            if fd < 0:
                err = ctypes.get_errno()
                raise OSError(err, os.strerror(err))
            self._fd = fd
            self._wake = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)   # close() wakes the thread at once
            self.available = True
        except (OSError, AttributeError) as exc:
            logger.warning("inotify is unavailable ({}): pressure is acted on at the periodic disk check "
                           "only, not when a segment rolls", exc)

    def sync(self, paths: dict[str, int]) -> None:
        """Watch exactly `paths` ({directory: dev}); start the thread on first use."""
        if not self.available:
            return
        with self._lock:
            self._wanted = dict(paths)
            for path in [p for p in self._watched if p not in paths]:
                self._drop(path)
            for path, dev in paths.items():
                self._add(path, dev)
            if self._thread is None and not self._stop.is_set():
                logger.info("watching {} for segment rolls (inotify)",
                            plural(len(self._watched), "log directory", "log directories"))
                self._thread = threading.Thread(target=self._run, name="retention-rollwatch", daemon=True)
                self._thread.start()

    def unwatched(self) -> list[str]:
        """Wanted directories not watched yet (they did not exist, or their watch is stale)."""
        stale = self.marks.stale()
        with self._lock:
            if not stale and len(self._watched) == len(self._wanted):
                return []      # every wanted one watched (only wanted ones are): asked every second
            return [p for p in self._wanted if p not in self._watched or p in stale]

    def retry(self) -> None:
        """Try again to watch directories that did not exist at `sync()`, and watch again at
        their path those whose watch is on a directory no longer there (`ChangeMarks.stale`)."""
        if not self.available:
            return
        with self._lock:
            for path in self.marks.stale():
                if path in self._watched:
                    self._drop(path)
                self.marks.unwatched(path)
            for path, dev in self._wanted.items():
                if path not in self._watched:
                    self._add(path, dev)

    def _add(self, path: str, dev: int) -> None:
        if path in self._watched:          # watched already (a moved or removed directory is dropped)
            self._wds[self._watched[path]] = dev
            return
        inode = _inode(path)
        wd = self._libc.inotify_add_watch(self._fd, os.fsencode(path), _MASK)
        if wd < 0:
            err = ctypes.get_errno()
            if err not in (errno.ENOENT, errno.ENOTDIR) and self._told.get(path) != err:
                self._told[path] = err     # said once, not at every retry (each disk check)
                logger.warning("cannot watch {} ({}): its pressure is acted on at the periodic disk check",
                               path, os.strerror(err))
            return
        self._told.pop(path, None)
        # A link's watch is its target's (the link pointed elsewhere raises no event); the inode
        # read before and after: the one watched (a mount put over it between would differ).
        marked = (_trusted(self._libc, os.fsencode(path)) and not os.path.islink(path)
                  and inode is not None and _inode(path) == inode)
        holder = self._dirs.get(wd)
        if holder is not None:      # watched for another path: one watch an inode, its events that path's
            if not marked or self.marks.is_watched(holder):
                return              # not watched: tried again at each retry()
            del self._watched[holder]       # a link's watch goes to the directory's own path
        self._watched[path] = wd
        self._wds[wd] = dev
        self._dirs[wd] = path
        if marked:
            self.marks.watched(path, inode)   # after the watch is added: a change from now on is an event

    def _drop(self, path: str) -> None:
        """Stop watching `path` (under the lock); it is keyed by stats until watched again."""
        wd = self._watched.pop(path)
        self._wds.pop(wd, None)
        self._dirs.pop(wd, None)
        self._libc.inotify_rm_watch(self._fd, wd)
        self.marks.unwatched(path)

    def _devs_of(self, data: bytes) -> set[int]:
        """The filesystems to check for the events in `data`; marks their directories dirty."""
        devs, dirty, gone = set(), set(), set()
        pos = 0
        with self._lock:
            while pos + _EVENT.size <= len(data):
                wd, mask, _cookie, length = _EVENT.unpack_from(data, pos)
                name = data[pos + _EVENT.size:pos + _EVENT.size + length].rstrip(b"\0")
                pos += _EVENT.size + length
                if mask & IN_Q_OVERFLOW:
                    self.marks.all_dirty()
                    continue
                path = self._dirs.get(wd)
                if path is None:
                    continue
                if _changes_contents(path, name, mask):
                    dirty.add(path)
                if mask & _GONE:
                    gone.add(path)
                elif mask & _ROLL and name not in QUIET:
                    devs.add(self._wds[wd])
            self.marks.dirty(dirty)
            for path in gone:           # watched again at the next retry(), at the path's directory now
                if path in self._watched:
                    self._drop(path)
        return devs

    def _read(self) -> set[int]:
        try:
            return self._devs_of(os.read(self._fd, 65536))
        except BlockingIOError:
            return set()

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.register(self._wake[0], select.POLLIN)
        hot: dict[int, float] = {}            # dev -> monotonic end of its hot window
        while not self._stop.is_set():
            now = time.monotonic()
            hot = {dev: until for dev, until in hot.items() if until > now}
            events = poller.poll(HOT_POLL * 1000 if hot else None)    # idle: until an event or close()
            if self._stop.is_set():
                return
            devs = set()
            if any(fd == self._fd for fd, _ in events):
                time.sleep(DEBOUNCE)   # a roll is a burst of events: let it finish, check once
                devs = self._read()
                until = time.monotonic() + HOT_WINDOW
                for dev in devs:
                    hot[dev] = until
            for dev in devs | set(hot):
                self.checks += 1
                try:
                    self._on_change(dev)
                except Exception as exc:  # noqa: BLE001 (a failed check never stops the watch)
                    logger.opt(exception=exc).warning("disk check after a roll failed: {}", exc)

    def close(self) -> None:
        self._stop.set()
        if self._wake is not None:
            os.write(self._wake[1], b"x")
        thread = self._thread
        if thread is not None:
            thread.join(timeout=2.0)
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            wake, self._wake = self._wake, None
            for end in wake or ():
                os.close(end)
            self.available = False
