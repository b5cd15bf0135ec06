"""The clock guard: notices a forward step of the wall clock and keeps the *trusted now* the planner
judges expiry and group staleness at until the operator accepts the new time or the clock returns
(the rules: `policies.clock_guard`).

Between looks (every disk check and pass) it compares the wall clock with the boot clock
(`/proc/uptime`); at start with its clock record (`clockrecord`, beside the audit trail) and, after
a reboot or without one, the newest time the logs and the audit trail hold. The record keeps the
trusted time, rewritten at the start look, at every transition and at most once a minute
(`MARK_EVERY`). A backward step beyond `threshold` holds nothing (a WARNING and `clock-set-back`);
a hold lifts with `clock-returned` or `accept()` (`clock-accepted`), each an audit line. What it
compares at start and why: docs, Operations, "A forward clock step"; Security, "Clock steps".

Thread-safe: one lock guards the state; the audit and the logs are read without it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime

from loguru import logger

from commitlog.bootclock import uptime
from policies import ClockMark, forward_step, held_trusted, humanize_duration, start_reference

from ..audit import (CLOCK_EVENTS, AuditTrail, ClockAcceptedEntry, ClockReturnedEntry, ClockSetBackEntry,
                     ClockSteppedEntry, Event, audit_time, read_tail)
from .clockrecord import ClockRecord, boot_id, record_path

__all__ = ["AT_START", "BETWEEN_LOOKS", "MARK_EVERY", "ClockGuard", "boot_clock", "newest_time"]

AT_START, BETWEEN_LOOKS, RESUMED = "at-start", "between-looks", "resumed"
MARK_EVERY = 60.0          # boot clock seconds between two writes of the clock record at looks


def boot_clock() -> float:
    """Seconds since boot from `/proc/uptime` (CLOCK_BOOTTIME, read from the kernel as a file, so a
    faked clock_gettime does not move it); the monotonic clock where that file cannot be read."""
    seconds = uptime()
    return seconds if seconds is not None else time.monotonic()


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
    step moves (default `boot_clock`); boot: this boot's id (default `boot_id`). audit: where
    transitions are written and a hold is resumed from, the clock record beside it (None: nowhere);
    `record=False` only reads them (`retention plan` changes nothing)."""

    def __init__(self, threshold: float, *, audit: AuditTrail | None = None, record: bool = True,
                 clock: Callable[[], float] = time.time, elapsed: Callable[[], float] = boot_clock,
                 boot: Callable[[], str | None] = boot_id) -> None:
        self.threshold = threshold
        self.audit = audit
        self._record = record
        self._clock, self._elapsed, self._boot = clock, elapsed, boot
        self._lock = threading.Lock()
        self._last: tuple[float, float] | None = None        # (wall, elapsed) at the last look
        self._base: tuple[float, float] | None = None        # (trusted wall, elapsed) while held
        self._detected: tuple[str, float] | None = None      # (how, wall time) of the step held
        self._boot_id: str | None = None                     # read by `start`; no record written without
        self._marked_at: float | None = None                 # elapsed at the last record made
        self._marks_made = self._marks_written = 0           # so a late write never undoes a newer one
        self._mark_lock = threading.Lock()

    @property
    def audit(self) -> AuditTrail | None:
        return self._audit

    @audit.setter
    def audit(self, audit: AuditTrail | None) -> None:
        """The audit trail, and the clock record beside it (`record_path`)."""
        self._audit = audit
        self._marks = None if audit is None else ClockRecord(record_path(audit.path))

    # ------------------------------------------------------------------ looking
    def start(self, newest: float | None) -> None:
        """The start-up look: resume a hold the clock record (else the audit trail's tail) says was
        not lifted, else compare the wall clock with where the record says it should be, or with
        `newest` (`newest_time`) (`policies.start_reference`). Then the record is rewritten."""
        wall, up, self._boot_id = self._clock(), self._elapsed(), self._boot()
        mark = self._read_mark()
        reference, exact = start_reference(mark, self._boot_id, up, newest)
        resumed = held_trusted(mark, self._boot_id, up)
        if resumed is None:             # an older record keeps no hold: the audit trail's tail may
            resumed = self._unlifted(wall)
            resumed = reference if resumed is not None and exact else resumed
        with self._lock:
            self._last = (wall, up)
            if resumed is not None:     # the first look lifts it if the clock came back meanwhile
                self._hold(resumed, up, wall, RESUMED, write=False)
            elif reference is not None and forward_step(reference, wall, self.threshold) is not None:
                self._hold(reference, up, wall, AT_START)
            elif exact and forward_step(wall, reference, self.threshold) is not None:
                self._set_back(reference, wall, AT_START)
            mark = self._due_mark(wall, up, force=True)
        self._write_mark(mark)

    def look(self) -> None:
        """Compare the wall clock with the elapsed time since the last look (and keep the record).
        The clocks are read under the lock: a reading taken before another thread's look, judged
        after it, would take the clock's return for a second step."""
        with self._lock:
            wall, up = self._clock(), self._elapsed()
            held = self._base is not None
            if self._base is not None:
                trusted = self._trusted(up)
                if forward_step(trusted, wall, self.threshold) is None:
                    self._lift(ClockReturnedEntry, wall, trusted)
            elif self._last is not None:
                expected = self._last[0] + (up - self._last[1])
                if forward_step(expected, wall, self.threshold) is not None:
                    self._hold(expected, up, wall, BETWEEN_LOOKS)
                elif forward_step(wall, expected, self.threshold) is not None:
                    self._set_back(expected, wall, BETWEEN_LOOKS)
            self._last = (wall, up)
            mark = self._due_mark(wall, up, force=held != (self._base is not None))
        self._write_mark(mark)

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
        with self._lock:
            wall, up = self._clock(), self._elapsed()
            if self._base is None:
                return {"held": False, "time": audit_time(wall)}
            trusted = self._trusted(up)
            self._lift(ClockAcceptedEntry, wall, trusted)
            self._last = (wall, up)
            mark = self._due_mark(wall, up, force=True)
        self._write_mark(mark)
        return {"held": True, "step_seconds": wall - trusted, "trusted_time": audit_time(trusted),
                "time": audit_time(wall)}

    # ------------------------------------------------------------------ reading
    def state(self) -> dict | None:
        """After a look: the held step (`step_seconds`, `trusted_time`, `time`, `detected`,
        `detected_at`), or None."""
        self.look()
        with self._lock:
            wall, up = self._clock(), self._elapsed()
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

    # ------------------------------------------------------------------ the clock record
    def _read_mark(self) -> ClockMark | None:
        if self._marks is None:
            return None
        mark = self._marks.read()
        if mark is None and not os.path.lexists(self._marks.path) and os.path.exists(self._audit.path):
            logger.warning("no clock record {} beside the audit trail: this start compares the clock with the "
                           "newest time on disk only; the record is written now", self._marks.path)
        return mark

    def _due_mark(self, wall: float, up: float, *, force: bool) -> tuple[int, ClockMark] | None:
        """Under the lock: the mark to write now (the trusted time while held) and its number, or
        None when it is not due (`MARK_EVERY`) or nothing is written (read-only, no audit, no boot id)."""
        if not self._record or self._marks is None or self._boot_id is None:
            return None
        if not force and self._marked_at is not None and 0 <= up - self._marked_at < MARK_EVERY:
            return None
        self._marked_at = up
        self._marks_made += 1
        if self._base is None:
            return self._marks_made, ClockMark(wall, up, self._boot_id)
        trusted = self._trusted(up)
        return self._marks_made, ClockMark(trusted, up, self._boot_id, wall - trusted)

    def _write_mark(self, due: tuple[int, ClockMark] | None) -> None:
        """Write a mark `_due_mark` made, unless a newer one was written meanwhile."""
        marks = self._marks
        if due is None or marks is None:
            return
        with self._mark_lock:
            if due[0] > self._marks_written:
                self._marks_written = due[0]
                marks.write(due[1])

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
            self._write(ClockSteppedEntry(time=wall, trusted_time=trusted, step_seconds=round(step, 3), detected=how,
                                          threshold_seconds=self.threshold))

    def _set_back(self, expected: float, wall: float, how: str) -> None:
        logger.warning("the wall clock is {} behind where it should be ({}, detected {}): it was set back; "
                       "nothing is held, but what is written meanwhile carries the back clock's times, and "
                       "when the clock is put right that is held as a forward step until accepted",
                       humanize_duration(expected - wall), audit_time(expected), how)
        self._write(ClockSetBackEntry(time=wall, expected_time=expected, step_seconds=round(expected - wall, 3),
                                      detected=how))

    def _lift(self, lifted: type[ClockAcceptedEntry], wall: float, trusted: float) -> None:
        self._base = self._detected = None
        logger.info("clock step lifted ({}): the wall clock {} is trusted again", lifted.EVENT, audit_time(wall))
        self._write(lifted(time=wall, trusted_time=trusted, step_seconds=round(wall - trusted, 3)))

    def _write(self, entry: object) -> None:
        if self.audit is not None and self._record:
            self.audit.note_or_log(entry)

    def _unlifted(self, wall: float) -> float | None:
        """The trusted now of a hold the audit trail records and no later line lifted; None when
        there is none or the wall clock is back before the line (the step resolved meanwhile)."""
        if self.audit is None:
            return None
        last = next((e for e in reversed(read_tail(self.audit.path)) if e.get("event") in CLOCK_EVENTS), None)
        if last is None or last["event"] != Event.CLOCK_STEPPED:
            return None
        at, trusted = _epoch(last.get("time")), _epoch(last.get("trusted_time"))
        if at is None or trusted is None or wall < at:
            return None
        return trusted + (wall - at)
