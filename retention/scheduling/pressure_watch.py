"""Pressure: each filesystem's disk reading, its pressure level, and back-to-back pressure passes.

A reading is one statvfs (`commitlog.disk_usage`); `policies.pressure` turns it into a level and
whether the disk forces. Crossing `clean_ratio` or `force_ratio` upwards starts a pass over every log
on that filesystem at once (`pressure:MOUNTPOINT`). While the disk forces, passes run back to back
(each still `files_per_pass` per log, still pausing `pause_between_files`) until the disk is at or
below `force_target`; for a second after that the filesystem is checked every 50 ms, so a writer that
resumes and pushes it straight back above gets the next pass at once.

Readings come from the periodic disk check and from the roll watch (`retention.scheduling.rollwatch`), which
checks a filesystem the moment a writer prepares or rolls a segment there. A pass that forced at its
own reading, above force_ratio before any of them saw it, starts the force too (`check(forced=True)`).

Thread-safe: `check()` may be called from any thread; a reading is taken under one lock and at most
one pressure job runs per filesystem.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from loguru import logger

from commitlog import disk_usage
from policies import LEVEL_CLEAN, LEVEL_FORCE, Pressure, pressure

from .filesystems import Filesystem
from .history import StatusHistory
from .metrics import THRESHOLDS, RetentionMetrics
from .scheduler_state import SchedulerState

__all__ = ["HOT_POLL", "HOT_WINDOW", "PressureWatch"]

HOT_POLL = 0.05           # seconds between two statvfs while a filesystem has just been under force
HOT_WINDOW = 1.0          # seconds a filesystem stays closely watched after a pressure pass


class PressureWatch:
    """Readings and pressure passes of the scheduler's filesystems.

    state: the scheduler's shared state (its filesystems change on reload; its stop flag).
    run_pass: runs one pass over every log of a filesystem, `run_pass(dev)`, returning a
      `PassResult` or None (stopped, gone, raised).
    schedule: `schedule(func, args, job_id)` runs `func(*args)` once on the pass pool.
    compact: `compact(dev)` after a pass that deleted nothing (deletion first); it decides itself
      whether the disk is above force_ratio (with `disk.force` off too: compaction drops only dead records).
    upload_now: `upload_now(dev)` when the filesystem starts forcing: the archive uploads of its logs
      run at once, and what they list is evicted by the next pass (`policies.archive_trust`).
    """

    def __init__(self, state: SchedulerState, *, metrics: RetentionMetrics, history: StatusHistory,
                 run_pass: Callable[[int], object], schedule: Callable[[Callable, tuple, str], None],
                 compact: Callable[[int], object] | None = None,
                 upload_now: Callable[[int], object] = lambda dev: None) -> None:
        self._metrics = metrics
        self._history = history
        self._state = state
        self._run_pass = run_pass
        self._schedule = schedule
        self._stopping = state.stopping
        self._compact = compact
        self._upload_now = upload_now
        self._lock = threading.Lock()
        self.running: set[int] = set()   # filesystems with a pressure job scheduled or running

    def check(self, dev: int, *, forced: bool = False) -> None:
        """Read filesystem `dev` now; start a pressure pass when it forces or crossed upwards.
        `forced`: a pass found it above force_ratio at its own reading (and may have left it below,
        limited by files_per_pass): it forces from there down to force_target, as after a reading
        here above force_ratio."""
        fs = self._state.filesystems.get(dev)
        if fs is None:
            return
        before, was_forcing = fs.level, fs.forcing
        try:
            now = self.measure(fs, forced=forced)
        except OSError as exc:
            logger.warning("disk check of {}: {}", fs.mountpoint, exc)
            return
        if now.forcing and not was_forcing:
            self._upload_now(dev)       # an archive that can take the data is asked first
        if now.forcing or (now.level > before and now.level >= LEVEL_CLEAN):
            self.request(dev)

    def measure(self, fs: Filesystem, *, forced: bool = False) -> Pressure:
        """One statvfs of `fs`: update its reading, the metrics and the pressure level (`forced`:
        a pass's reading was above force_ratio, see `check`)."""
        usage = disk_usage(fs.probe())
        ratio = usage.used_ratio
        disks = fs.disks()
        mono = time.monotonic()
        with self._lock:
            previous = fs.level
            level = pressure(ratio, disks, forcing_before=fs.forcing or forced)
            fs.used_ratio, fs.total_bytes, fs.free_bytes = ratio, usage.total_bytes, usage.free_bytes
            fs.level, fs.checked_at = level.level, time.time()
            if level.forcing and fs.force_since is None:
                fs.force_since = mono
                logger.warning("disk {} is {:.1%} used, {}: passes run back to back until it is at or "
                               "below force_target", fs.mountpoint, ratio,
                               "above force_ratio at a pass's reading" if forced and level.level < LEVEL_FORCE
                               else "above force_ratio")
            elif not level.forcing and fs.force_since is not None:
                logger.info("disk {} is back at or below force_target ({:.1%} used) after {:.2f}s",
                            fs.mountpoint, ratio, mono - fs.force_since)
                fs.force_since = None
            elif level.level > previous and level.level == LEVEL_CLEAN:
                logger.info("disk {} is {:.1%} used, above clean_ratio: expired segments go at any hour",
                            fs.mountpoint, ratio)
            fs.forcing = level.forcing
            checked_at = fs.checked_at
        self._metrics.set_disk(fs.mountpoint, ratio, usage.free_bytes, level.level)
        self._history.disk(fs.mountpoint, ratio, checked_at)
        self._metrics.set_thresholds(fs.mountpoint, {k: min(getattr(d, k) for d in disks) for k in THRESHOLDS})
        return level

    def request(self, dev: int) -> None:
        """Schedule a pressure job for `dev` unless one is scheduled or running."""
        with self._lock:
            if dev in self.running or self._stopping.is_set():
                return
            self.running.add(dev)
        fs = self._state.filesystems.get(dev)
        job_id = f"pressure:{fs.mountpoint if fs else dev}"
        try:
            self._schedule(self._job, (dev,), job_id)
        except Exception as exc:  # noqa: BLE001 (a scheduler shutting down)
            with self._lock:
                self.running.discard(dev)
            logger.debug("pressure pass not scheduled: {}", exc)

    def _job(self, dev: int) -> None:
        """Passes over every log on the filesystem, back to back while the disk forces.

        A writer that was refused resumes as soon as the disk is below force_ratio and may push it
        back above within milliseconds, so after a pass ends the forcing the filesystem stays watched
        closely (a statvfs every `HOT_POLL` seconds) for `HOT_WINDOW` seconds: a new crossing in
        that time starts the next pass at once instead of at the next disk check."""
        try:
            while not self._stopping.is_set():
                result = self._run_pass(dev)
                fs = self._state.filesystems.get(dev)
                if result is None or fs is None or result.interrupted:
                    return
                ended = time.monotonic()
                if result.deleted == 0:
                    # Nothing deletable now (held, active, consumed-protected): compaction may still
                    # free space (deletion went first); then the disk check asks again.
                    if self._compact is not None:
                        self._compact(dev)
                    return
                pause = max(p.pause_between_files for p in fs.policies())
                hot_until = ended + HOT_WINDOW
                while not self.measure(fs).forcing:
                    if time.monotonic() >= hot_until or self._stopping.wait(HOT_POLL):
                        return
                # Still pausing between deletions: the next pass starts `pause` after the last one.
                left = ended + pause - time.monotonic()
                if left > 0 and self._stopping.wait(left):
                    return
        finally:
            with self._lock:
                self.running.discard(dev)
