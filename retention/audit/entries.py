"""The audit trail's vocabulary and the lines it writes: event names, abort reasons, the time
format, and the entries of a deletion, an abort and a recovered deletion (the format is described
in `retention.audit`). Pure: builds dicts, writes nothing.
"""

from __future__ import annotations

from datetime import datetime, timezone

from policies import DELETED, plural

__all__ = ["ABORTED", "ABORT_REASONS", "ARCHIVED", "CLOCK_ACCEPTED", "CLOCK_EVENTS", "CLOCK_RETURNED",
           "CLOCK_SET_BACK", "CLOCK_STEPPED", "COMPACTED", "DAMAGED", "DELETED", "EVENTS", "INTENT", "OUTCOMES",
           "SettledIntents", "aborted_entry", "audit_time", "deletion_entry", "recovered_deletion"]

INTENT, ABORTED = "intent", "aborted"
COMPACTED = "compacted"    # the outcome of a compaction output's intent (retention.compaction.compactor)
ARCHIVED = "archived"      # the outcome of an upload's intent (retention.archiving.uploader)
DAMAGED = "damaged"        # an entry of a log's damage record, seen by a pass (commitlog.damage)
CLOCK_STEPPED, CLOCK_ACCEPTED, CLOCK_RETURNED = "clock-stepped", "clock-accepted", "clock-returned"
CLOCK_EVENTS = (CLOCK_STEPPED, CLOCK_ACCEPTED, CLOCK_RETURNED)   # retention.deletion.clockguard's holds
CLOCK_SET_BACK = "clock-set-back"                                 # ... and a backward step (no hold)
EVENTS = (INTENT, DELETED, ABORTED, COMPACTED, ARCHIVED, DAMAGED, *CLOCK_EVENTS, CLOCK_SET_BACK)
OUTCOMES = (DELETED, ABORTED, COMPACTED, ARCHIVED)
# Why an intent removed (or archived) nothing.
ABORT_REASONS = ("held", "head-changed", "error", "not-removed", "removed-by-another", "log-missing",
                 "not-archived")


def audit_time(at: float) -> str:
    """The `time` of an audit line: ISO 8601 UTC with milliseconds."""
    return datetime.fromtimestamp(at, timezone.utc).isoformat(timespec="milliseconds")


def deletion_entry(*, at: float, log: str, path: str, segment: str, base_offset: int,
                   end_offset: int, bytes: int, triggers: list[str], forced: bool,
                   overridden_by: str | None, unconsumed: list[tuple[str, int, int]],
                   pinned_by: list[dict] | None = None, archived: bool = False, paced: bool = False,
                   unpaced: str | None = None) -> dict:
    """The audit line of one deletion; `unconsumed` holds (group, first, end-exclusive) ranges;
    `archived`: the log's archive tier holds the segment (an eviction, nothing lost); `paced`: its
    bytes were freed at the policy's disk.delete_rate, `unpaced`: why that rate was not applied."""
    entry = {
        "time": audit_time(at),
        "log": log,
        "path": path,
        "segment": segment,
        "base_offset": base_offset,
        "end_offset": end_offset,
        "bytes": bytes,
        "triggers": triggers,
        "forced": forced,
        "overridden_by": overridden_by,
        "unconsumed": [{"group": g, "first_offset": first, "end_offset": end}
                       for g, first, end in unconsumed],
        "pinned_by": pinned_by or [],
        "archived": archived,
        "paced": paced,
    }
    if unpaced:
        entry["unpaced"] = unpaced
    return entry


def aborted_entry(intent: dict, *, at: float, reason: str) -> dict:
    """The outcome line of an intent that removed nothing (`reason` from ABORT_REASONS)."""
    return {"time": audit_time(at), **{k: intent[k] for k in ("log", "path", "segment", "base_offset",
                                                         "end_offset")}, "reason": reason}


def recovered_deletion(intent: dict, *, at: float) -> dict:
    """The deletion line written for a dead process's intent whose segment left the log."""
    entry = {k: intent[k] for k in ("log", "path", "segment", "base_offset", "end_offset", "bytes",
                                    "triggers", "forced", "overridden_by", "unconsumed", "pinned_by", "archived",
                                    "unpaced")   # not "paced": a crash's leftover went at once
             if k in intent}
    return {"time": audit_time(at), **entry, "intent_time": intent.get("time")}


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
