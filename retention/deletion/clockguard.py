"""The clock guard: notices a forward step of the wall clock and keeps the *trusted now* the planner
judges expiry and group staleness at until the operator accepts the new time or the clock returns
(the rules: `policies.clock_guard`).

- Between looks (every disk check and every pass): the wall clock against the time elapsed on the
  kernel's boot clock (`/proc/uptime`, which no settimeofday and no LD_PRELOAD clock faker moves; it
  counts a suspend, so a resumed VM is no step). A jump beyond `threshold` holds, the trusted now
  being the wall time before the jump plus the time elapsed since.
- At start: the wall clock against the newest time the logs hold (every file's mtime in each log
  directory: segments, and `state.db` and its WAL for the groups' commits) and the audit trail (its
  mtime and its lines' times). A hold the audit trail records as not accepted resumes instead.
- The hold lifts when the wall clock comes back within `threshold` of the trusted now
  (`clock-returned`), or on `accept()` (`clock-accepted`). Each transition is an audit line.

Thread-safe: one lock guards the state; the audit and the logs are read without it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime

from loguru import logger

from policies import forward_step, humanize_duration

from ..audit import (CLOCK_ACCEPTED, CLOCK_EVENTS, CLOCK_RETURNED, CLOCK_STEPPED, AuditTrail, audit_time,
                     read_tail)

__all__ = ["AT_START", "BETWEEN_LOOKS", "ClockGuard", "boot_clock", "newest_time"]

AT_START, BETWEEN_LOOKS, RESUMED = "at-start", "between-looks", "resumed"


def boot_clock() -> float:
    """Seconds since boot from `/proc/uptime` (CLOCK_BOOTTIME, read from the kernel as a file, so a
    faked clock_gettime does not move it); the monotonic clock where that file cannot be read."""
    try:
        with open("/proc/uptime", "rb") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return time.monotonic()


def newest_time(log_paths: Iterable[str], audit_path: str) -> float | None:
    """The newest epoch time the logs' files and the audit trail hold (None: nothing found)."""
    times = []
    for path in log_paths:
        try:
            with os.scandir(path) as entries:
                times.extend(e.stat(follow_symlinks=False).st_mtime for e in entries
                             if e.is_file(follow_symlinks=False))
        except OSError:
            continue            # a log not created yet holds no time
    try:
        times.append(os.stat(audit_path).st_mtime)
    except OSError:
        pass
    for entry in read_tail(audit_path):
        when = _epoch(entry.get("time"))
        if when is not None:
            times.append(when)
    return max(times) if times else None


def _epoch(text: object) -> float | None:
    try:
        return datetime.fromisoformat(text).timestamp() if isinstance(text, str) else None
    except ValueError:
        return None


class ClockGuard:
    """A wall clock's forward steps and the trusted now (see the module docstring).

    threshold: seconds (`service.clock_step_threshold`). clock: the wall clock; elapsed: a clock no
    step moves (default `boot_clock`). audit: where transitions are written and a hold is resumed
    from (None: nowhere); `record=False` only reads it (`retention plan` changes nothing)."""

    def __init__(self, threshold: float, *, audit: AuditTrail | None = None, record: bool = True,
                 clock: Callable[[], float] = time.time, elapsed: Callable[[], float] = boot_clock) -> None:
        self.threshold = threshold
        self.audit = audit
        self._record = record
        self._clock, self._elapsed = clock, elapsed
        self._lock = threading.Lock()
        self._last: tuple[float, float] | None = None        # (wall, elapsed) at the last look
        self._base: tuple[float, float] | None = None        # (trusted wall, elapsed) while held
        self._detected: tuple[str, float] | None = None      # (how, wall time) of the step held

    # ------------------------------------------------------------------ looking
    def start(self, newest: float | None) -> None:
        """The start-up look: resume a hold the audit trail has not seen lifted, else compare the
        wall clock with `newest` (`newest_time`)."""
        wall, up = self._clock(), self._elapsed()
        resumed = self._unlifted(wall)
        with self._lock:
            self._last = (wall, up)
            if resumed is not None:
                self._hold(resumed, up, wall, RESUMED, write=False)
            elif newest is not None and forward_step(newest, wall, self.threshold) is not None:
                self._hold(newest, up, wall, AT_START)

    def look(self) -> None:
        """Compare the wall clock with the elapsed time since the last look."""
        wall, up = self._clock(), self._elapsed()
        with self._lock:
            if self._base is not None:
                trusted = self._trusted(up)
                if forward_step(trusted, wall, self.threshold) is None:
                    self._lift(CLOCK_RETURNED, wall, trusted)
            elif self._last is not None:
                expected = self._last[0] + (up - self._last[1])
                if forward_step(expected, wall, self.threshold) is not None:
                    self._hold(expected, up, wall, BETWEEN_LOOKS)
            self._last = (wall, up)

    def trusted_now(self) -> float | None:
        """After a look: the trusted now while a step is held, else None (the wall clock is trusted)."""
        self.look()
        with self._lock:
            return None if self._base is None else self._trusted(self._elapsed())

    def judged(self) -> float:
        """The time expiry and staleness are judged at: the trusted now while a step is held, else
        the wall clock (archive total retention asks this)."""
        trusted = self.trusted_now()
        return self._clock() if trusted is None else min(trusted, self._clock())

    def accept(self) -> dict:
        """The operator accepts the wall clock: the hold lifts (`clock-accepted`). Returns what was
        accepted: `{"held": bool, "step_seconds", "trusted_time", "time"}`."""
        wall, up = self._clock(), self._elapsed()
        with self._lock:
            if self._base is None:
                return {"held": False, "time": audit_time(wall)}
            trusted = self._trusted(up)
            self._lift(CLOCK_ACCEPTED, wall, trusted)
            self._last = (wall, up)
            return {"held": True, "step_seconds": wall - trusted, "trusted_time": audit_time(trusted),
                    "time": audit_time(wall)}

    # ------------------------------------------------------------------ reading
    def state(self) -> dict | None:
        """After a look: the held step (`step_seconds`, `trusted_time`, `time`, `detected`,
        `detected_at`), or None."""
        self.look()
        wall, up = self._clock(), self._elapsed()
        with self._lock:
            if self._base is None:
                return None
            trusted = self._trusted(up)
            how, at = self._detected
            return {"step_seconds": wall - trusted, "trusted_time": audit_time(trusted), "time": audit_time(wall),
                    "detected": how, "detected_at": audit_time(at)}

    def describe(self) -> str | None:
        """The health problem's message while a step is held, else None."""
        held = self.state()
        if held is None:
            return None
        return (f"the wall clock is {humanize_duration(held['step_seconds'])} ahead of the trusted time "
                f"{held['trusted_time']} (detected {held['detected']}): what only the step would expire or "
                f"make stale waits; `retention clock accept` accepts the new time")

    # ------------------------------------------------------------------ transitions (under the lock)
    def _trusted(self, up: float) -> float:
        return self._base[0] + (up - self._base[1])

    def _hold(self, trusted: float, up: float, wall: float, how: str, *, write: bool = True) -> None:
        self._base, self._detected = (trusted, up), (how, wall)
        step = wall - trusted
        logger.warning("the wall clock is {} ahead of the trusted time {} (detected {}): time-based deletion "
                       "and group staleness wait for what only the step would make due; `retention clock "
                       "accept` accepts the new time", humanize_duration(step), audit_time(trusted), how)
        if write:
            self._write({"event": CLOCK_STEPPED, "time": audit_time(wall), "trusted_time": audit_time(trusted),
                         "step_seconds": round(step, 3), "detected": how, "threshold_seconds": self.threshold})

    def _lift(self, event: str, wall: float, trusted: float) -> None:
        self._base = self._detected = None
        logger.info("clock step lifted ({}): the wall clock {} is trusted again", event, audit_time(wall))
        self._write({"event": event, "time": audit_time(wall), "trusted_time": audit_time(trusted),
                     "step_seconds": round(wall - trusted, 3)})

    def _write(self, entry: dict) -> None:
        if self.audit is None or not self._record:
            return
        try:
            self.audit.append(entry, sync=True, keep=True)
        except OSError as exc:
            logger.error("audit {} cannot be written ({}); kept in memory to append later: {}",
                         self.audit.path, exc, entry)

    def _unlifted(self, wall: float) -> float | None:
        """The trusted now of a hold the audit trail records and no later line lifted; None when
        there is none or the wall clock is back before the line (the step resolved meanwhile)."""
        if self.audit is None:
            return None
        last = next((e for e in reversed(read_tail(self.audit.path)) if e.get("event") in CLOCK_EVENTS), None)
        if last is None or last["event"] != CLOCK_STEPPED:
            return None
        at, trusted = _epoch(last.get("time")), _epoch(last.get("trusted_time"))
        if at is None or trusted is None or wall < at:
            return None
        return trusted + (wall - at)
