"""The writer's disk guard and its background flusher.

DiskGuard: above refuse_writes_ratio the writer raises StoreFullError (or blocks, on_full="block")
until the disk is below resume_ratio; the disk is read at most every CHECK_EVERY seconds of
appending (the append path compares `checked_ns <= now < due_ns` itself and calls `check()` only
when due). Used under the writer's lock: not thread-safe on its own.

Flusher: for flush="async", a daemon thread that writes the active segment's dirty pages every
`interval` seconds, under the writer's lock; the same thread rolls an idle writer's segment by
time (`roll_after`, at most a second late).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from ..diskusage import disk_usage
from ..errors import StoreFullError

log = logging.getLogger("commitlog")

CHECK_EVERY = 0.1                     # seconds of appending between two disk checks
_NEVER = 1 << 63


class DiskGuard:
    """Refuses or holds writes on a full disk; see the module docstring. `refuse_ratio=None`
    disables it (the append path then never calls `check`)."""

    def __init__(self, path: str, refuse_ratio: float | None, resume_ratio: float, on_full: str,
                 block_timeout: float, on_refuse: Callable[[], object] | None = None) -> None:
        self.path = path
        self.refuse_ratio = refuse_ratio
        self.resume_ratio = resume_ratio
        self.on_full = on_full
        self.block_timeout = block_timeout
        self.on_refuse = on_refuse  # called once when writes start being refused
        self.refusing = False
        self.checked_ns = 0                                  # time_ns of the last check
        self.due_ns = 0 if refuse_ratio is not None else _NEVER  # time_ns of the next

    def may_reserve(self, nbytes: int) -> bool:
        """Whether reserving `nbytes` more keeps the disk at or below refuse_writes_ratio (the
        preallocator asks before preparing a segment ahead). Thread-safe (reads only)."""
        if self.refuse_ratio is None:
            return True
        usage = disk_usage(self.path)
        denominator = usage.used_bytes + usage.free_bytes
        return denominator > 0 and (usage.used_bytes + nbytes) / denominator <= self.refuse_ratio

    def check(self) -> None:
        """Refuse (or hold) writes above refuse_writes_ratio until the disk is below resume_ratio."""
        if self.refuse_ratio is None:
            return
        deadline = None
        while True:
            ratio = disk_usage(self.path).used_ratio
            now = time.time_ns()
            self.checked_ns = now
            self.due_ns = now + int(CHECK_EVERY * 1e9)
            if self.refusing and ratio < self.resume_ratio:
                self.refusing = False
                log.info("disk of %s at %.1f%%: writes resume", self.path, ratio * 100)
            elif not self.refusing and ratio > self.refuse_ratio:
                self.refusing = True
                log.warning("disk of %s at %.1f%% is above refuse_writes_ratio %.0f%%: writes refused",
                            self.path, ratio * 100, self.refuse_ratio * 100)
                if self.on_refuse is not None:
                    self.on_refuse()
            if not self.refusing:
                return
            message = (f"disk of {self.path} is {ratio:.1%} used, above refuse_writes_ratio "
                       f"{self.refuse_ratio:.0%}; writes resume below {self.resume_ratio:.0%}")
            if self.on_full == "raise":
                raise StoreFullError(message, used_ratio=ratio)
            if deadline is None:
                deadline = time.monotonic() + self.block_timeout
            if time.monotonic() >= deadline:
                raise StoreFullError(message + f" (blocked {self.block_timeout:g}s)", used_ratio=ratio)
            time.sleep(0.05)


class Flusher:
    """A daemon thread calling `flush_due()` every `interval` seconds until `stop()`."""

    def __init__(self, name: str, interval: float, flush_due: Callable[[], bool]) -> None:
        self._stop = threading.Event()
        self._flush_due = flush_due  # returns False once the log is closed
        self._thread = threading.Thread(target=self._run, args=(interval,), name=name, daemon=True)
        self._thread.start()

    @classmethod
    def for_writer(cls, path: str, flush: str, flush_interval: float, roll_after: float | None,
                   flush_due: Callable[[], bool]) -> "Flusher | None":
        """The thread a writer with these settings needs (None when it flushes nothing in the
        background and never rolls by time)."""
        if flush != "async" and roll_after is None:
            return None
        every = flush_interval if flush == "async" else 1.0
        if roll_after is not None:
            every = min(every, 1.0, roll_after)
        return cls(f"commitlog-flush:{path}", every, flush_due)

    def _run(self, interval: float) -> None:
        while not self._stop.wait(interval):
            if not self._flush_due():
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()
