"""The audit trail's vocabulary and how a record becomes a line: event names, abort reasons, intent
actions (each a `StrEnum`, declared once, with its one-line doc), the time format, and `line_fields`,
the only place a record (`retention.audit.records`) is turned into the keys of a line (the format is
described in `retention.audit`). Pure: writes nothing.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from enum import StrEnum
from types import MappingProxyType

from policies import plural

__all__ = ["ABORTED", "ABORT_REASONS", "ABORT_REASON_DOCS", "ARCHIVED", "CLOCK_ACCEPTED", "CLOCK_EVENTS",
           "CLOCK_RETURNED", "CLOCK_SET_BACK", "CLOCK_STEPPED", "COMPACTED", "DAMAGED", "DELETED", "EVENTS",
           "EVENT_DOCS", "INTENT", "INTENT_ACTIONS", "INTENT_ACTION_DOCS", "OUTCOMES", "AbortReason", "Event",
           "IntentAction", "OMIT", "SettledIntents", "audit_time", "line_fields"]


class _Omit:
    def __repr__(self) -> str:
        return "OMIT"


OMIT = _Omit()
"""A record field's value meaning "this line has no such key"."""


class Event(StrEnum):
    """A line's `event`."""

    INTENT = "intent"
    DELETED = "deleted"
    ABORTED = "aborted"
    COMPACTED = "compacted"
    ARCHIVED = "archived"
    DAMAGED = "damaged"
    CLOCK_STEPPED = "clock-stepped"
    CLOCK_ACCEPTED = "clock-accepted"
    CLOCK_RETURNED = "clock-returned"
    CLOCK_SET_BACK = "clock-set-back"


class AbortReason(StrEnum):
    """Why an intent removed, compacted or archived nothing (an `aborted` line's `reason`)."""

    HELD = "held"
    HEAD_CHANGED = "head-changed"
    ERROR = "error"
    NOT_REMOVED = "not-removed"
    REMOVED_BY_ANOTHER = "removed-by-another"
    LOG_MISSING = "log-missing"
    NOT_ARCHIVED = "not-archived"
    NO_ROOM = "no-room"
    TOO_LARGE = "too-large"
    INPUTS_CHANGED = "inputs-changed"
    NOT_COMPACTED = "not-compacted"


class IntentAction(StrEnum):
    """What an intent is about to do (its `action`)."""

    DELETE = "delete"
    COMPACT = "compact"
    ARCHIVE = "archive"
    ARCHIVE_DELETE = "archive-delete"
    EVICT_COPY = "evict-copy"


INTENT, DELETED, ABORTED, COMPACTED, ARCHIVED = (Event.INTENT, Event.DELETED, Event.ABORTED, Event.COMPACTED,
                                                 Event.ARCHIVED)
DAMAGED, CLOCK_SET_BACK = Event.DAMAGED, Event.CLOCK_SET_BACK
CLOCK_STEPPED, CLOCK_ACCEPTED, CLOCK_RETURNED = Event.CLOCK_STEPPED, Event.CLOCK_ACCEPTED, Event.CLOCK_RETURNED
CLOCK_EVENTS = (CLOCK_STEPPED, CLOCK_ACCEPTED, CLOCK_RETURNED)   # retention.deletion.clockguard's holds
EVENTS = tuple(Event)
OUTCOMES = (DELETED, ABORTED, COMPACTED, ARCHIVED)
ABORT_REASONS = tuple(AbortReason)
INTENT_ACTIONS = tuple(IntentAction)

EVENT_DOCS = MappingProxyType({
    INTENT: "about to do its `action` (fsynced first); its outcome line carries the same `id`",
    DELETED: "the outcome of a removal: a segment, an archived object or a cached copy left (`recovered`: "
    "settled for a dead process)",
    ABORTED: "the outcome of an intent that did nothing; `reason` says why",
    COMPACTED: "the outcome of a compaction output (`action: compact`)",
    ARCHIVED: "the outcome of an upload (`action: archive`): the manifest lists the segment",
    DAMAGED: "an entry of a log's `damage.json`, seen by a pass (written once per entry)",
    CLOCK_STEPPED: "the wall clock is far ahead of the trusted time: what only the step makes due waits",
    CLOCK_ACCEPTED: "the operator accepted the stepped clock (`retention clock accept`)",
    CLOCK_RETURNED: "the stepped clock came back to the trusted time",
    CLOCK_SET_BACK: "the wall clock is behind where it should be; nothing is held",
})
"""Every event with its one-line meaning (the docs' table is generated from it)."""

ABORT_REASON_DOCS = MappingProxyType({
    AbortReason.HELD: "a reader held the segment; the removal is retried every `retry_every`",
    AbortReason.HEAD_CHANGED: "another process removed the head first (not a failure)",
    AbortReason.ERROR: "the store, the filesystem or the tier refused (the `error` key says what)",
    AbortReason.NOT_REMOVED: "the process died before its removal changed anything (settled later)",
    AbortReason.REMOVED_BY_ANOTHER: "the process died, and another process removed and audited the segment "
    "(`covered_by`)",
    AbortReason.LOG_MISSING: "the log directory is gone",
    AbortReason.NOT_ARCHIVED: "an upload that did not reach the manifest (the process died, or the segment left "
    "the log or was replaced first); the next run sends it again",
    AbortReason.NO_ROOM: "a compaction output did not fit in the free space (one of several inputs: retried as "
    "two halves)",
    AbortReason.TOO_LARGE: "a compaction output did not fit in one segment; retried as two halves",
    AbortReason.INPUTS_CHANGED: "a head removal or another compaction took an input first (not a failure)",
    AbortReason.NOT_COMPACTED: "the process died before the compaction's commit point; its leftovers are removed",
})
"""Every abort reason with its one-line meaning (the docs' table is generated from it)."""

INTENT_ACTION_DOCS = MappingProxyType({
    IntentAction.DELETE: "remove a log's head segment (`retention.deletion`)",
    IntentAction.COMPACT: "write a compaction output over its inputs (`retention.compaction`)",
    IntentAction.ARCHIVE: "upload a sealed segment to the log's archive tier",
    IntentAction.ARCHIVE_DELETE: "delete an object from an archive tier (total retention, a cluster log's "
    "collector)",
    IntentAction.EVICT_COPY: "evict a cluster log's cached copy of an archived segment",
})
"""Every intent action with its one-line meaning (the docs' table is generated from it)."""


def audit_time(at: float) -> str:
    """The `time` of an audit line: ISO 8601 UTC with milliseconds."""
    return datetime.fromtimestamp(at, timezone.utc).isoformat(timespec="milliseconds")


def line_fields(record: object) -> dict:
    """The keys of `record`'s line, in its fields' order: `OMIT` values are left out, a `stamp` field
    (epoch seconds) is written with `audit_time`, a `flat` one (a mapping) spreads its keys, a nested
    record becomes an object and a tuple a list. A mapping is taken as it is."""
    if not dataclasses.is_dataclass(record):
        return dict(record)
    out: dict = {}
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if value is OMIT:
            continue
        if f.metadata.get("flat"):
            out.update(value)
        elif f.metadata.get("stamp"):
            out[f.name] = audit_time(value)
        else:
            out[f.name] = _plain(value)
    return out


def _plain(value: object) -> object:
    if dataclasses.is_dataclass(value):
        return line_fields(value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


class SettledIntents:
    """Tallies the intents settled for dead processes, to say once per log what was settled
    (one line, however many intents a crash left). Not thread-safe: one settling pass owns it."""

    def __init__(self, what: str) -> None:
        self.what = what                       # "removal" or "compaction"
        self._counts: dict[str, dict[str, int]] = {}
        self._pids: dict[str, set] = {}

    def add(self, log: str, outcome: str, pid: object) -> None:
        per_log = self._counts.setdefault(log, {})
        per_log[outcome] = per_log.get(outcome, 0) + 1
        self._pids.setdefault(log, set()).add(pid if isinstance(pid, int) else "?")

    @property
    def total(self) -> int:
        return sum(sum(c.values()) for c in self._counts.values())

    def lines(self) -> list[str]:
        """One line per log, e.g. `staging: settled 3 audit intents of interrupted removals
        (pid 4242, died before writing their outcome): 1 deleted, 2 not-removed`."""
        out = []
        for log, counts in sorted(self._counts.items()):
            total = sum(counts.values())
            pids = ", ".join(str(p) for p in sorted(self._pids[log], key=str))
            outcomes = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
            out.append(f"{log}: settled {plural(total, 'audit intent')} of interrupted "
                       f"{self.what}s (pid {pids}, died before writing the outcome): {outcomes}")
        return out
