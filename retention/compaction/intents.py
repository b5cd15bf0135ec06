"""The audit lines of compaction outputs (`retention.audit` holds the trail and its durability).

For each output: an `intent` with `"action": "compact"` (fsynced before the store is called), then a
`compacted` outcome or an `aborted` one with a `reason` (`no-room`, `too-large`, `inputs-changed`,
`error`). Fields: `time, log, path` (the output's file, named after its first input), `segment,
inputs` (file names), `first_offset, end_offset` (the span of what left: every dropped record lies
in it), `bytes_before` (the inputs' file bytes), `bytes_after` (the output's file bytes, 0 when nothing
was live), `dropped: {dead, superseded, tombstone}`; the intent also holds `planned_bytes_after` and
`input_inodes`, which let a later pass tell whether a dead process's output happened.

`settle` audits the intents of processes that died between intent and outcome (SIGKILL), with
`"recovered": true`: `compacted` when the first input's file is no longer the inode the intent named
(the swap renamed the output over it, its commit point, or an output with nothing live removed it),
else `aborted` with `reason: not-compacted` (nothing was swapped; the `.cleaned` leftovers are removed
by the settling `Compactor`). A recovered `compacted` line has `dropped: null`: only the dead process
knew the counts; for an output with nothing live its `end_offset` stops at the first input still
there (the inputs are removed oldest first; the pass that removes the rest audits them). `log-missing` when the log directory is gone.

Thread-safe and process-safe as `AuditTrail` is.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Mapping
from dataclasses import replace

from loguru import logger

from commitlog import parse_segment_name

from ..audit import (AbortReason, AuditTrail, CompactionAbortedEntry, CompactionEntry, Event, IntentAction,
                     RecoveredCompactionEntry, SettledIntents)

__all__ = ["COMPACT", "CompactionAudit"]

COMPACT = IntentAction.COMPACT           # the intent's `action`
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def _removed_up_to(intent: dict, end: int) -> int:
    """The end of what an output with nothing live removed before its process died: it removes its
    inputs oldest first, so it stopped at the first one still there as the intent saw it (that
    one's records did not leave; the pass that removes it audits them). `end` if none is left."""
    directory = os.path.dirname(str(intent["path"]))
    for name, inode in list(zip(intent.get("inputs") or (), intent["input_inodes"]))[1:]:
        try:
            still = os.stat(os.path.join(directory, name)).st_ino == inode
        except FileNotFoundError:
            still = False
        base = parse_segment_name(name)
        if still and base is not None:
            return base
    return end


class CompactionAudit:
    """Intents and outcomes of compaction outputs in `trail`; `clock` gives epoch seconds."""

    def __init__(self, trail: AuditTrail, clock: Callable[[], float]) -> None:
        self.trail = trail
        self._clock = clock

    def intent(self, planned: CompactionEntry, entry) -> str | None:
        """Fsync the intent of `planned`; its id, or None (with `entry.error` set) when the trail
        cannot be written for a reason other than a full disk. On a full disk the output goes
        ahead under a fresh id: compaction is what frees space when everything left is protected."""
        try:
            return self.trail.intent(COMPACT, planned)
        except OSError as exc:
            if exc.errno in _NO_SPACE:
                logger.error("{}: audit {} is full ({}); compacting {} anyway; its line follows once "
                             "space is back", planned.log, self.trail.path, exc.strerror or exc,
                             planned.segment)
                return os.urandom(8).hex()
            entry.error = f"the audit trail {self.trail.path} cannot be written: {exc}"
            logger.error("{}: not compacting: {}", planned.log, entry.error)
            return None

    def compacted(self, ident: str, done: CompactionEntry) -> None:
        self.trail.outcome_or_log(ident, Event.COMPACTED, replace(done, time=self._clock()))

    def aborted(self, ident: str, planned: CompactionEntry, reason: AbortReason, exc, entry) -> None:
        """The output did nothing; `entry` (a `LogCompaction`) gets the error unless None (the plan
        was merely overtaken, or the output is retried as halves). Returns None."""
        self.trail.outcome_or_log(ident, Event.ABORTED,
                                  CompactionAbortedEntry.of(planned, self._clock(), reason, error=str(exc)))
        if entry is not None:
            entry.error = str(exc)
            logger.error("{}: compacting {} failed ({}): {}", planned.log, planned.segment, reason, exc)
        else:
            logger.info("{}: compacting {} not done ({}): {}", planned.log, planned.segment, reason, exc)
        return None

    def settle(self, logs: Callable[[], Mapping[str, object]]) -> int:
        """Settle the compaction intents of dead processes for the logs `logs()` maps (absolute log
        directory -> `WatchedLog`, asked only when an intent is open); returns how many were
        settled (see the module docstring)."""
        try:
            if self.trail.backlog:
                self.trail.flush_backlog()
            open_intents = self.trail.unresolved()
        except OSError as exc:
            logger.warning("audit {} cannot be read to settle interrupted compactions: {}", self.trail.path, exc)
            return 0
        settled = SettledIntents("compaction")
        by_path = logs() if open_intents else {}
        for intent in open_intents:
            watched = by_path.get(os.path.dirname(str(intent.get("path"))))
            inodes = intent.get("input_inodes")
            if intent.get("action") != IntentAction.COMPACT or watched is None or not isinstance(inodes, list) or not inodes:
                continue
            settled.add(watched.name, self._settle_one(intent, watched, inodes[0]), intent.get("pid"))
        for line in settled.lines():
            logger.warning(line)
        return settled.total

    def _settle_one(self, intent: dict, watched, first_inode: int) -> str:
        now = self._clock()
        if not watched.exists():
            self.trail.outcome_or_log(intent["id"], Event.ABORTED,
                                      CompactionAbortedEntry.of(intent, now, AbortReason.LOG_MISSING),
                                      recovered=True)
            return AbortReason.LOG_MISSING
        try:
            st = os.stat(intent["path"])
        except FileNotFoundError:
            st = None
        if st is not None and st.st_ino == first_inode:
            self.trail.outcome_or_log(intent["id"], Event.ABORTED,
                                      CompactionAbortedEntry.of(intent, now, AbortReason.NOT_COMPACTED),
                                      recovered=True)
            return AbortReason.NOT_COMPACTED
        end = intent.get("end_offset")
        if st is None:
            end = _removed_up_to(intent, end)
        self.trail.outcome_or_log(intent["id"], Event.COMPACTED,
                                  RecoveredCompactionEntry.of(intent, now, end_offset=end,
                                                              bytes_after=st.st_size if st else 0), recovered=True)
        return Event.COMPACTED
