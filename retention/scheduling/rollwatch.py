"""The roll watch: a disk check the moment a writer prepares or rolls a segment, not a second later.

A writer (in another process, or this one) prepares its next segment as a hidden file in the log
directory and reserves its whole size with posix_fallocate: that is when used disk jumps. Linux
inotify tells this process when a file is created, renamed into or closed after writing in a watched
log directory; the watch then checks that filesystem at once and keeps checking it every
`HOT_POLL` seconds for `HOT_WINDOW` seconds (the reservation follows the creation by milliseconds).

inotify is reached through ctypes (libc's `inotify_init1`/`inotify_add_watch`), no new dependency.
Where it is unavailable (not Linux, no libc symbol, the per-user watch limit reached) the watch says
so in one WARNING line and the periodic disk check alone acts on pressure.

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

from policies import plural

__all__ = ["DEBOUNCE", "HOT_POLL", "HOT_WINDOW", "RollWatch"]

IN_CLOSE_WRITE = 0x00000008
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_ONLYDIR = 0x01000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
_MASK = IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE | IN_ONLYDIR
_EVENT = struct.Struct("iIII")   # wd, mask, cookie, len; then len bytes of name

DEBOUNCE = 0.005     # seconds: events closer than this make one check
HOT_POLL = 0.02      # seconds between two checks while a filesystem is hot
HOT_WINDOW = 0.25    # seconds a filesystem stays hot after an event (fallocate follows the create)


def _libc():
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name or "libc.so.6", use_errno=True)
    libc.inotify_init1.argtypes = [ctypes.c_int]
    libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
    return libc


class RollWatch:
    """Watches log directories and calls `on_change(dev)` when a filesystem should be checked now.

    paths: {directory: dev}. A directory that does not exist yet is retried at each `sync()`."""

    def __init__(self, on_change: Callable[[int], object]) -> None:
        self._on_change = on_change
        self._lock = threading.Lock()
        self._wds: dict[int, int] = {}        # watch descriptor -> dev
        self._watched: dict[str, int] = {}    # directory -> watch descriptor
        self._wanted: dict[str, int] = {}
        self._told: dict[str, int] = {}       # directory -> the errno its last failed watch was said with
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._fd = -1
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
                wd = self._watched.pop(path)
                self._wds.pop(wd, None)
                self._libc.inotify_rm_watch(self._fd, wd)
            for path, dev in paths.items():
                self._add(path, dev)
            if self._thread is None and not self._stop.is_set():
                logger.info("watching {} for segment rolls (inotify)",
                            plural(len(self._watched), "log directory", "log directories"))
                self._thread = threading.Thread(target=self._run, name="retention-rollwatch", daemon=True)
                self._thread.start()

    def unwatched(self) -> list[str]:
        """Wanted directories not watched yet (they did not exist)."""
        with self._lock:
            return [p for p in self._wanted if p not in self._watched]

    def retry(self) -> None:
        """Try again to watch directories that did not exist at `sync()`."""
        if not self.available:
            return
        with self._lock:
            for path, dev in self._wanted.items():
                if path not in self._watched:
                    self._add(path, dev)

    def _add(self, path: str, dev: int) -> None:
        wd = self._libc.inotify_add_watch(self._fd, os.fsencode(path), _MASK)
        if wd < 0:
            err = ctypes.get_errno()
            if err not in (errno.ENOENT, errno.ENOTDIR) and self._told.get(path) != err:
                self._told[path] = err     # said once, not at every retry (each disk check)
                logger.warning("cannot watch {} ({}): its pressure is acted on at the periodic disk check",
                               path, os.strerror(err))
            return
        self._told.pop(path, None)
        self._watched[path] = wd
        self._wds[wd] = dev

    def _devs_of(self, data: bytes) -> set[int]:
        devs = set()
        pos = 0
        with self._lock:
            while pos + _EVENT.size <= len(data):
                wd, _mask, _cookie, length = _EVENT.unpack_from(data, pos)
                pos += _EVENT.size + length
                dev = self._wds.get(wd)
                if dev is not None:
                    devs.add(dev)
        return devs

    def _read(self) -> set[int]:
        try:
            return self._devs_of(os.read(self._fd, 65536))
        except BlockingIOError:
            return set()

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        hot: dict[int, float] = {}            # dev -> monotonic end of its hot window
        while not self._stop.is_set():
            now = time.monotonic()
            hot = {dev: until for dev, until in hot.items() if until > now}
            timeout = HOT_POLL if hot else 1.0     # idle: wake once a second to notice close()
            events = poller.poll(timeout * 1000)
            if self._stop.is_set():
                return
            devs = set()
            if events:
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
        thread = self._thread
        if thread is not None:
            thread.join(timeout=2.0)
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            self.available = False
