"""What the status page shows of the recent past: each filesystem's used ratio over the last hour and
the last passes, in bounded ring buffers fed by the scheduler.

Memory is bounded whatever the uptime or the disk-check interval: per filesystem at most
`DISK_POINTS` points (one per `DISK_STEP` seconds, the highest reading of its step, so a short spike
above a line still shows), at most `MAX_FILESYSTEMS` filesystems, and the last `PASSES` passes.

Thread-safe: the disk check, the pass threads and HTTP requests call it concurrently (one lock).
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque

DISK_WINDOW = 3600.0         # seconds of disk history kept: the last hour
DISK_STEP = 10.0             # seconds per point
DISK_POINTS = int(DISK_WINDOW / DISK_STEP)
MAX_FILESYSTEMS = 64         # filesystems beyond this evict the least recently measured
PASSES = 50


class StatusHistory:
    """Ring buffers of disk readings (per mountpoint) and of pass summaries."""

    def __init__(self, *, step: float = DISK_STEP, points: int = DISK_POINTS, passes: int = PASSES) -> None:
        self._step = step
        self._points = points
        self._lock = threading.Lock()
        self._disk: OrderedDict[str, deque[list[float]]] = OrderedDict()
        self._passes: deque[dict] = deque(maxlen=passes)

    def disk(self, mountpoint: str, used_ratio: float, at: float) -> None:
        """One disk reading at epoch seconds `at`; readings in one step keep the highest."""
        bucket = at - at % self._step
        with self._lock:
            ring = self._disk.get(mountpoint)
            if ring is None:
                ring = self._disk[mountpoint] = deque(maxlen=self._points)
                while len(self._disk) > MAX_FILESYSTEMS:
                    self._disk.popitem(last=False)
            self._disk.move_to_end(mountpoint)
            if ring and ring[-1][0] == bucket:
                ring[-1][1] = max(ring[-1][1], used_ratio)
            else:
                ring.append([bucket, used_ratio])

    def disk_series(self, mountpoint: str, now: float) -> list[list[float]]:
        """[[epoch seconds, used ratio], ...] of the last hour, oldest first."""
        since = now - self._step * self._points
        with self._lock:
            return [[t, round(r, 5)] for t, r in self._disk.get(mountpoint, ()) if t >= since]

    def passed(self, entry: dict) -> None:
        """A pass summary: at, kind, logs, outcome, deleted, freed_bytes, duration_seconds, error."""
        with self._lock:
            self._passes.append(entry)

    def passes(self) -> list[dict]:
        """The last passes, newest first."""
        with self._lock:
            return list(reversed(self._passes))
