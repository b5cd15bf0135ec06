"""One planned head segment removed under audit, and the removals dead processes left unaudited.

`AuditedRemoval.remove` fsyncs the removal's intent, removes the segment through the store's
crash-safe head removal (its bytes freed at `disk.delete_rate`, `.pacer`), and appends the outcome:
deleted, held by a reader (hung), or removed first by another process (aborted `head-changed`, not
a failure). A full disk does not stop deletion: when the intent cannot be written for lack of
space (ENOSPC, EDQUOT) the segment is deleted anyway, with an ERROR line, because refusing would
turn a full disk into an outage; the outcome line, written once the deletion freed space, carries
the whole record. Any other audit error (permissions, a read-only filesystem) fails the deletion:
nothing goes unaudited for a fixable mistake.

`settle_intents` audits, from each log's start offset, the intents of processes that died
mid-removal, so a SIGKILL anywhere leaves no removal unaudited. Called from one pass at a time
(the cleaner's pass lock); the audit trail takes its own lock.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterable
from dataclasses import replace

from loguru import logger

from commitlog import CommitLogError
from policies import ARCHIVED, BUDGET, DELETED, FAILED, HUNG, PolicyConfig, SegmentDecision, plural

from ..audit import (OMIT, AbortedEntry, AbortReason, AuditTrail, DeletionEntry, Event, IntentAction, PinnedBy,
                     RecoveredDeletionEntry, SettledIntents, UnconsumedRange)
from .pacer import Pacing
from .pinned import find_pinned
from .results import LogPassResult
from .watched import WatchedLog

__all__ = ["AuditedRemoval"]

_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


class AuditedRemoval:
    """Removes planned head segments under audit for one cleaner (see the module docstring)."""

    def __init__(self, audit: AuditTrail, clock: Callable[[], float], pacing: Pacing) -> None:
        self.audit = audit
        self._clock = clock
        self._pacing = pacing

    def remove(self, r: LogPassResult, decision: SegmentDecision, watched: WatchedLog, policy: PolicyConfig,
               wait: Callable[[float], object]) -> bool:
        """Remove one planned head segment of `r`'s log, audited, its bytes freed at the rate;
        False stops this log for the pass."""
        if r.not_writable:          # nothing is attempted, nor audited as attempted
            r.actions[decision.base_offset] = FAILED
            r.errors[decision.base_offset] = r.not_writable
            logger.error("{}: not deleting {}: {}", r.name, decision.segment, r.not_writable)
            return False
        rate = self._pacing.rate(r, policy)
        planned = DeletionEntry(
            time=self._clock(), log=r.name, path=decision.path, segment=decision.segment,
            base_offset=decision.base_offset, end_offset=decision.end_offset, bytes=decision.bytes,
            triggers=tuple(r.plan.triggers), forced=decision.forced, overridden_by=decision.overridden_by,
            unconsumed=tuple(UnconsumedRange(group=u.group, first_offset=u.first_offset, end_offset=u.end_offset)
                             for u in decision.unconsumed),
            pinned_by=(), archived=ARCHIVED in decision.because, paced=rate is not None,
            unpaced=r.unpaced or OMIT, budget=decision.details[BUDGET] if BUDGET in decision.because else OMIT)
        ident = self._write_intent(r, decision, planned)
        if ident is None:
            return False
        try:
            removal = watched.log.remove_head(force=decision.forced, expected_base=decision.base_offset,
                                              leave_over=self._pacing.leave_over(rate))
            if removal.doomed is not None:
                self._pacing.free(removal.doomed, removal.bytes, rate, r, policy, wait)
            elif removal.status == "removed":
                self._pacing.spend(removal.bytes, rate)
        except (CommitLogError, OSError) as exc:
            r.actions[decision.base_offset] = FAILED
            r.errors[decision.base_offset] = str(exc)
            logger.error("{}: deleting {} failed: {}", r.name, decision.segment, exc)
            self._settle(ident, planned, watched, reason=AbortReason.ERROR)
            return False
        if removal.status == "removed":
            self._removed(r, decision, watched, ident, planned, removal)
            return True
        if removal.status == "held":
            return self._held(r, decision, watched, ident, planned)
        # mismatch or active: another process removed the head since the plan; not a failure.
        self.audit.outcome_or_log(ident, Event.ABORTED,
                                  AbortedEntry.of(planned, self._clock(), AbortReason.HEAD_CHANGED))
        ahead = removal.base_offset is None or removal.base_offset > decision.base_offset
        if ahead:
            r.removed_by_another.add(decision.base_offset)
        logger.info("{}: {} was already removed by another process (head is now {}){}", r.name,
                    decision.segment, removal.base_offset, "" if ahead else "; stopping for this pass")
        return ahead

    def _removed(self, r: LogPassResult, decision: SegmentDecision, watched: WatchedLog, ident: str,
                 planned: DeletionEntry, removal) -> None:
        """The outcome of a segment gone: its audit line (who pinned a forced one), the log line."""
        try:
            watched.hung.forget(decision.base_offset)
        except (CommitLogError, OSError) as exc:   # an entry left: it only restarts a clock
            logger.error("{}: could not update the hung-segment registry: {}", r.name, exc)
        holders = []
        if removal.forced:
            holders = [PinnedBy(pid=p.pid, command=p.command)
                       for p in find_pinned([watched.path]) if p.path == decision.path]
        self.audit.outcome_or_log(ident, Event.DELETED, replace(planned, time=self._clock(), bytes=removal.bytes,
                                                          forced=removal.forced, pinned_by=tuple(holders)))
        r.actions[decision.base_offset] = DELETED
        r.deleted_bytes += removal.bytes
        lost = ", ".join(f"{u.group} [{u.first_offset}, {u.end_offset})" for u in decision.unconsumed)
        logger.info("{}: deleted {} ({} bytes, triggers {}{}{})", r.name, decision.segment,
                    removal.bytes, ",".join(r.plan.triggers),
                    ", forced while held by " + ",".join(str(h.pid) for h in holders)
                    if removal.forced else "",
                    (f", unconsumed by {lost}" + (" (readable from the archive)" if ARCHIVED in decision.because
                                                  else "")) if lost else "")

    def _held(self, r: LogPassResult, decision: SegmentDecision, watched: WatchedLog, ident: str,
              planned: DeletionEntry) -> bool:
        """A reader holds the segment: aborted `held`, and the segment hung (retried, then forced)."""
        now = self._clock()
        self.audit.outcome_or_log(ident, Event.ABORTED, AbortedEntry.of(planned, now, AbortReason.HELD))
        try:
            entry = watched.hung.held(decision.base_offset, now)
        except (CommitLogError, OSError) as exc:   # its file refused (a planted link, say)
            r.actions[decision.base_offset] = FAILED
            r.errors[decision.base_offset] = str(exc)
            logger.error("{}: {} is held by a reader, and recording it failed: {}", r.name,
                         decision.segment, exc)
            return False
        r.actions[decision.base_offset] = HUNG
        logger.warning("{}: {} is held by a reader (first found held {:.0f}s ago); kept for now",
                       r.name, decision.segment, now - entry.first_attempt_at)
        return False

    def _write_intent(self, r: LogPassResult, decision: SegmentDecision, planned: DeletionEntry) -> str | None:
        """Fsync the intent; None (deletion failed) when the audit cannot be written for a reason
        other than a full disk. On a full disk, the deletion goes ahead under a fresh id."""
        try:
            return self.audit.intent(IntentAction.DELETE, planned)
        except OSError as exc:
            if exc.errno in _NO_SPACE:
                logger.error("{}: audit {} is full ({}); deleting {} anyway, since refusing would "
                             "turn a full disk into an outage; its line follows once space is back",
                             r.name, self.audit.path, exc.strerror or exc, decision.segment)
                return os.urandom(8).hex()
            r.actions[decision.base_offset] = FAILED
            r.errors[decision.base_offset] = f"the audit trail {self.audit.path} cannot be written: {exc}"
            logger.error("{}: not deleting {}: the audit trail {} cannot be written: {}", r.name,
                         decision.segment, self.audit.path, exc)
            return None

    def _settle(self, ident: str, planned: DeletionEntry, watched: WatchedLog, *, reason: AbortReason) -> None:
        """After an error inside the removal: audit what the log's start offset says happened."""
        try:
            gone = watched.log.start_offset > planned.base_offset
        except (CommitLogError, OSError):
            return  # the intent stays open; a later pass settles it once this process is gone
        if gone:
            self.audit.outcome_or_log(ident, Event.DELETED, replace(planned, error=reason))
        else:
            self.audit.outcome_or_log(ident, Event.ABORTED, AbortedEntry.of(planned, self._clock(), reason))

    def settle_intents(self, logs: dict[str, WatchedLog], names: Iterable[str] | None) -> None:
        """Audit the intents of processes that died mid-removal, for `logs` (those of `names`)."""
        if self.audit.backlog:
            try:
                self.audit.flush_backlog()
            except OSError as exc:
                logger.error("audit {} still cannot be written ({}); {} kept in memory",
                             self.audit.path, exc, plural(self.audit.backlog, "line"))
        try:
            open_intents = self.audit.unresolved()
        except OSError as exc:
            logger.warning("audit {} cannot be read to settle interrupted removals: {}",
                           self.audit.path, exc)
            return
        if not open_intents:
            return
        mine = {os.path.abspath(logs[n].path): logs[n] for n in (names if names is not None else logs)}
        settled = SettledIntents("removal")
        for intent in open_intents:
            if intent.get("action", IntentAction.DELETE) != IntentAction.DELETE:
                continue  # a compaction's intent: retention.compaction.compactor settles it
            watched = mine.get(os.path.dirname(str(intent.get("path"))))
            if watched is None or not isinstance(intent.get("base_offset"), int):
                continue  # another cleaner's log
            outcome = self._settle_one(intent, watched)
            if outcome is not None:
                settled.add(watched.name, outcome, intent.get("pid"))
        for line in settled.lines():
            logger.warning(line)

    def _settle_one(self, intent: dict, watched: WatchedLog) -> str | None:
        """Write the outcome of a dead process's removal intent; returns what it was (None when
        it cannot be told yet)."""
        now = self._clock()
        try:
            if not watched.exists():
                self.audit.outcome_or_log(intent["id"], Event.ABORTED,
                                          AbortedEntry.of(intent, now, AbortReason.LOG_MISSING), recovered=True)
                return AbortReason.LOG_MISSING
            gone = watched.log.start_offset > intent["base_offset"]
        except (CommitLogError, OSError) as exc:
            logger.warning("{}: cannot settle the audit intent {}: {}", watched.name, intent["id"], exc)
            return None
        if gone and intent.get("covered_by"):
            self.audit.outcome_or_log(intent["id"], Event.ABORTED,
                                      AbortedEntry.of(intent, now, AbortReason.REMOVED_BY_ANOTHER,
                                                      covered_by=intent["covered_by"]), recovered=True)
            return AbortReason.REMOVED_BY_ANOTHER
        if gone:
            self.audit.outcome_or_log(intent["id"], Event.DELETED, RecoveredDeletionEntry.of(intent, now),
                                      recovered=True)
            return Event.DELETED
        self.audit.outcome_or_log(intent["id"], Event.ABORTED, AbortedEntry.of(intent, now, AbortReason.NOT_REMOVED),
                                  recovered=True)
        return AbortReason.NOT_REMOVED
