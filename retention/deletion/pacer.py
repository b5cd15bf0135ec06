"""A cleaner's pacing of its deletions by bytes (`disk.delete_rate`, decided by `policies.pacing`):
the waits before a file and between the truncation steps of a large one, cut short by a stop
request or by the disk going over force_ratio meanwhile, and what each log's result says of it.

A wait holds no lock of the store (the removal's own lock is released before the first step) and
none of the status's; only the cleaner's pass lock, which serialises its passes anyway.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable

from loguru import logger

from commitlog import CommitLogError, shrink_doomed, unlink_doomed
from policies import BytePacer, PolicyConfig, disk_triggers, step_bytes, unpaced_reason

from .pinned import held_by_any
from .results import LogPassResult
from .watched import disk_snapshot

_SLICE = 1.0     # seconds: the longest a pacing wait goes without looking at the disk


class Pacing:
    """The byte bucket of one cleaner, kept across its passes (a pass started right after another
    still owes what that one removed). Not thread-safe: the pass lock serialises its users."""

    def __init__(self, stop: threading.Event, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._stop = stop
        self._clock = clock
        self._bucket = BytePacer()
        self._lifted: str | None = None     # why this pass stopped pacing midway

    def begin_pass(self) -> None:
        self._lifted = None

    def rate(self, r: LogPassResult, policy: PolicyConfig) -> int | None:
        """The rate a deletion from `r` is paced at now, or None; the first deletion of a log that
        goes unpaced despite its delete_rate says why, on `r.unpaced` and in a log line."""
        rate = policy.disk.delete_rate
        if rate is None:
            return None
        why = unpaced_reason(r.plan.triggers) or self._lifted
        if why is None:
            return rate
        if r.unpaced is None:
            r.unpaced = why
            logger.warning("{}: {}", r.name, why)
        return None

    def before(self, r: LogPassResult, policy: PolicyConfig, pause: float,
               wait: Callable[[float], object]) -> None:
        """Wait before deleting from `r`: `pause` (pause_between_files), or longer while the bytes
        removed so far are not paid at the rate; the excess counts in `r.paced_seconds`."""
        due = self._bucket.due(self._clock()) if policy.disk.delete_rate is not None else 0.0
        if due <= pause or self.rate(r, policy) is None:
            if pause:
                wait(pause)
            return
        r.paced_seconds += max(0.0, self._wait(due, r, policy, wait) - pause)

    def spend(self, nbytes: int, rate: int | None) -> None:
        """Count `nbytes` removed at `rate` (None: unpaced, nothing owed)."""
        if rate is not None:
            self._bucket.spend(nbytes, rate, self._clock())

    def leave_over(self, rate: int | None) -> int | None:
        """The size above which a removal leaves its file to `free` in steps (None: unlink whole)."""
        return None if rate is None else step_bytes(rate)

    def free(self, doomed: str, nbytes: int, rate: int, r: LogPassResult, policy: PolicyConfig,
             wait: Callable[[float], object]) -> None:
        """Free the renamed file `doomed` of `nbytes` at `rate`: truncated in steps with the waits
        they cost, then unlinked. A file another process has open or mapped is unlinked whole (its
        pages stay theirs); a stop request or the disk going over force_ratio unlinks the rest at once."""
        freed = 0
        try:
            if not held_by_any(doomed):
                with contextlib.closing(shrink_doomed(doomed, step_bytes(rate))) as steps:
                    for step in steps:
                        freed += step
                        due = self._bucket.spend(step, rate, self._clock())
                        waited = self._wait(due, r, policy, wait)
                        r.paced_seconds += waited
                        if waited < due:
                            break
            unlink_doomed(doomed)
        except OSError as exc:       # the segment is out of the log: its leftover is finish_removals'
            logger.error("{}: freeing {} failed, left for the next pass: {}", r.name, doomed, exc)
        self.spend(nbytes - freed, rate)

    def _wait(self, seconds: float, r: LogPassResult, policy: PolicyConfig,
              wait: Callable[[float], object]) -> float:
        """`wait` out `seconds` in slices, looking at the disk of `r` after each; returns the
        seconds asked for, fewer when a stop request or the disk going over force_ratio ended it."""
        slices = max(1, math.ceil(seconds / _SLICE))
        for done in range(1, slices + 1):
            if self._stop.is_set() or self._lift(r, policy):
                return seconds * (done - 1) / slices
            wait(seconds / slices)
        return seconds

    def _lift(self, r: LogPassResult, policy: PolicyConfig) -> bool:
        """True (and pacing off for the rest of the pass) when the disk of `r` is now over force_ratio."""
        try:
            used = disk_snapshot(r.path).used_ratio
        except (CommitLogError, OSError):
            return False
        why = unpaced_reason(disk_triggers(policy.disk, used))
        if why is not None and self._lifted is None:
            self._lifted = why
            logger.warning("{}: the disk went {} midway through a pass", r.name, why)
        return why is not None
