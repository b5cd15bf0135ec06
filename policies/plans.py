"""A plan: a delete-or-keep decision with reasons for every segment, per log (the planner's output).

All classes are frozen dataclasses holding immutable values, so a plan is thread-safe. ``details``
turn reason codes into plain words lazily, on first use.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from types import MappingProxyType
from typing import Any, NamedTuple

from policies.config import PolicyConfig
from policies.reasons import DELETE, DELETED, HELD, KEEP
from policies.snapshot import DiskSnapshot, live_ratio
from policies.triggers import local_hour
from policies.units import format_hours, format_size, humanize_duration, humanize_size

__all__ = ["LogPlan", "Plan", "SegmentDecision", "UnconsumedRange", "explain_codes"]


_EMPTY: Mapping[str, str] = MappingProxyType({})


class UnconsumedRange(NamedTuple):
    """Offsets of one segment that one consumer group had not consumed. Immutable."""

    group: str
    first_offset: int
    end_offset: int
    """Exclusive."""


@dataclass(frozen=True)
class SegmentDecision:
    """What the pass does with one segment and why. Immutable.

    ``reasons`` are the codes that keep the segment (empty for a delete); ``because`` the codes that
    make a delete go (``expired`` and triggers). For a delete,
    ``overridden`` lists the codes that would have kept it had ``overridden_by`` (``disk-force`` or
    ``manual``) not forced the pass, and ``unconsumed`` records, per consumer group, the offsets it had
    not consumed, for the audit trail. ``details`` holds plain words for each code in ``reasons`` and
    ``overridden``.
    """

    base_offset: int
    end_offset: int
    """Exclusive."""
    path: str
    bytes: int
    action: str
    """``delete`` or ``keep`` in a plan; an executor reports ``deleted``, ``hung`` or ``failed`` instead."""
    reasons: tuple[str, ...] = ()
    because: tuple[str, ...] = ()
    """For a delete, why it goes: ``expired`` (older than reserve) and the triggers that let it."""
    forced: bool = False
    """Delete even if a reader still holds it: a held segment past ``force_after``."""
    unconsumed: tuple[UnconsumedRange, ...] = ()
    log: str = ""
    """Name of the log, for :meth:`explain`."""
    retry: bool = False
    """A repeated delete attempt on a segment an earlier pass found held."""
    overridden: tuple[str, ...] = ()
    overridden_by: str | None = None
    age_seconds: float = 0.0
    """Seconds from the segment's last write to the plan's time."""
    used_bytes: int | None = None
    """Bytes of records in the segment (None: not known)."""
    live_bytes: int | None = None
    """Bytes of its records that are not dead (None: not known)."""
    index_bytes: int = 0
    """Bytes of its index file on disk, freed with it (not part of ``bytes``, the segment file's)."""
    detail_facts: Mapping[str, tuple] = field(default_factory=lambda: _EMPTY, hash=False, repr=False)
    """Per code, a formatter and its arguments; ``details`` turns them into words on first use,
    because a pass over 100,000 segments must not format 100,000 explanations nobody reads."""

    @functools.cached_property
    def details(self) -> Mapping[str, str]:
        """Plain words, with the figures behind them, for each code in ``reasons``, ``because`` and ``overridden``."""
        return MappingProxyType({code: fact[0](*fact[1:]) for code, fact in self.detail_facts.items()})

    @property
    def live_ratio(self) -> float | None:
        """See :func:`policies.snapshot.live_ratio`."""
        return live_ratio(self.live_bytes, self.used_bytes)

    @property
    def segment(self) -> str:
        """The segment's file name."""
        return os.path.basename(self.path)

    def explain(self) -> str:
        """One line in plain words, e.g. ``staging 00000000000000000120.log keep: reserved (...), prefix``."""
        return f"{self.log} {self.segment} {self.action}: {self.why()}"

    def why(self) -> str:
        """Why, in words with the figures: a keep's reasons, or why a deletion goes, what it
        overrode and any earlier hold (``explain`` less its head)."""
        if self.action == KEEP:
            return explain_codes(self.reasons, None, (), None, self.details)
        words = explain_codes((), self.because, self.overridden, self.overridden_by, self.details)
        if self.retry:
            held = ("forced" if self.forced else "retried") + f" ({self.details.get(HELD, 'was held')})"
            words = f"{words}, {held}" if words else held
        return words


def explain_codes(reasons: Sequence[str], because: Sequence[str] | None, overridden: Sequence[str],
                  overridden_by: str | None, details: Mapping[str, str]) -> str:
    """The codes of one decision in words, each with its figures from ``details``: a keep's
    ``reasons`` (``because`` None), or a deletion's ``because`` and what it overrode
    (``size-cap (size 2.1GiB > retention_bytes 2GiB) overrides reserved (...)``). The one wording
    of `explain`, the status page and `retention plan`'s table (which has only the JSON)."""
    def words(code: str) -> str:
        detail = details.get(code)
        return f"{code} ({detail})" if detail else code
    if because is None:
        return ", ".join(map(words, reasons))
    parts = [words(code) for code in because if code != overridden_by]
    if overridden:
        parts.append(f"{words(overridden_by) if overridden_by else '?'} overrides " + ", ".join(map(words, overridden)))
    return ", ".join(parts)


@dataclass(frozen=True)
class LogPlan:
    """The plan for one log: its triggers and a decision for each segment, oldest first. Immutable."""

    name: str
    path: str
    policy: str
    disk: DiskSnapshot
    triggers: tuple[str, ...]
    decisions: tuple[SegmentDecision, ...]
    stale_groups: tuple[str, ...] = ()
    """Consumer groups silent for longer than ``consumer_ttl``, which protect nothing."""

    @property
    def to_delete(self) -> tuple[SegmentDecision, ...]:
        return tuple(decision for decision in self.decisions if decision.action == DELETE)

    @property
    def freed_bytes(self) -> int:
        """Bytes the planned deletions free."""
        return sum(decision.bytes for decision in self.to_delete)

    def explain(self) -> str:
        """A header line for the log, then one line per segment."""
        triggers = ", ".join(self.triggers) or "none"
        header = (
            f"{self.name} (policy {self.policy}): disk {self.disk.used_ratio:.1%} used, triggers {triggers}, "
            f"{len(self.to_delete)} to delete ({format_size(self.freed_bytes)})"
        )
        if self.stale_groups:
            header += f"; stale consumer groups, not protecting: {', '.join(self.stale_groups)}"
        return "\n".join([header, *(decision.explain() for decision in self.decisions)])

    def _gone(self) -> tuple[SegmentDecision, ...]:
        """Decisions planned for deletion, or already deleted once an executor rewrote the actions."""
        return tuple(decision for decision in self.decisions if decision.action in (DELETE, DELETED))

    def to_json_dict(self) -> dict[str, Any]:
        """This log's entry of the ``--json`` object; ``deleted`` and ``freed_bytes`` count planned or done deletions."""
        return {
            "name": self.name,
            "path": self.path,
            "disk": {
                "used_ratio": self.disk.used_ratio,
                "total_bytes": self.disk.total_bytes,
                "free_bytes": self.disk.free_bytes,
            },
            "triggers": list(self.triggers),
            "files": [_file_json(decision) for decision in self.decisions],
            "deleted": len(self._gone()),
            "freed_bytes": sum(decision.bytes for decision in self._gone()),
        }


def _file_json(decision: SegmentDecision) -> dict[str, Any]:
    """A decision as JSON, each code it carries explained with its figures in ``details``."""
    entry: dict[str, Any] = {
        "segment": decision.segment,
        "base_offset": decision.base_offset,
        "bytes": decision.bytes,
        "action": decision.action,
        "reasons": list(decision.reasons),
        "live_bytes": decision.live_bytes,
        "live_ratio": decision.live_ratio,
    }
    if decision.action == DELETE:
        entry["because"] = list(decision.because)
        if decision.overridden:
            entry["overridden"] = list(decision.overridden)
            entry["overridden_by"] = decision.overridden_by
    entry["details"] = dict(decision.details)
    return entry


@dataclass(frozen=True)
class Plan:
    """What one pass would do, for every log, at time ``at``. Immutable."""

    at: datetime
    logs: tuple[LogPlan, ...]

    def log(self, name: str) -> LogPlan:
        """The plan of the log named ``name`` (KeyError if absent)."""
        for log_plan in self.logs:
            if log_plan.name == name:
                return log_plan
        raise KeyError(name)

    def explain(self) -> str:
        return "\n".join(log_plan.explain() for log_plan in self.logs)

    def to_json_dict(self) -> dict[str, Any]:
        """The ``--json`` object; for a plan, ``deleted`` counts planned deletions and ``freed_bytes`` their bytes."""
        return {"at": self.at.isoformat(), "logs": [log_plan.to_json_dict() for log_plan in self.logs]}


# --- the words of a decision's details: each formatter turns the facts a decision kept
# (``SegmentDecision.detail_facts``, ``(formatter, *facts)``) into the words beside a code.
# Called only when an explanation is read, never while planning.


def reserved_detail(reserve: float, age: float) -> str:
    return f"younger than {humanize_duration(reserve)}, {humanize_duration(age)} old"


def unconsumed_detail(found: UnconsumedRange) -> str:
    return f"{found.group} has not consumed offsets {found.first_offset} to {found.end_offset - 1}"


def forced_detail(held_for: float, force_after: float) -> str:
    return f"held for {humanize_duration(held_for)}, past force_after {humanize_duration(force_after)}"


def retried_detail(held_for: float, since_attempt: float) -> str:
    return f"held for {humanize_duration(held_for)}, last attempt {humanize_duration(since_attempt)} ago"


def waiting_detail(held_for: float, next_in: float) -> str:
    return f"held for {humanize_duration(held_for)}, next attempt in {humanize_duration(next_in)}"


def force_detail(projected_ratio: float, target: float) -> str:
    return f"disk {projected_ratio:.1%} used before it, deleting down to {target:.0%}"


def prefix_detail(first_kept: str) -> str:
    return f"{first_kept} is kept"


def batch_detail(files_per_pass: int) -> str:
    return f"{files_per_pass} deletions already planned"


def no_trigger_detail(delete_at_hours: tuple[int, ...], used_ratio: float, clean_ratio: float,
                       retention_bytes: int | None, log_bytes: int) -> str:
    hours = f"delete_at_hours {format_hours(delete_at_hours)} not now" if delete_at_hours else "no delete hours"
    cap = "" if retention_bytes is None else \
        f", size {humanize_size(log_bytes)} within retention_bytes {humanize_size(retention_bytes)}"
    return (f"{hours}, disk {used_ratio:.1%} used "
            f"(clean above {clean_ratio:.0%}){cap}, no manual pass")


def expired_detail(age: float, reserve: float) -> str:
    return f"{humanize_duration(age)} since its last write, reserve {humanize_duration(reserve)}"


def window_detail(policy: PolicyConfig, now: datetime) -> str:
    return f"hour {local_hour(policy, now):02d} is in delete_at_hours {format_hours(policy.delete_at_hours)}"


def clean_detail(used_ratio: float, clean_ratio: float) -> str:
    return f"disk {used_ratio:.1%} used, above clean_ratio {clean_ratio:.0%}"


def manual_detail(remaining: int, forcing: bool) -> str:
    """`remaining` counts the pass that reads this: 1 is the request's last (or only) pass."""
    after = remaining - 1
    left = f"{after} more pass{'es' if after != 1 else ''} of it after this one" if after else "its last pass"
    return f"an operator's request, {left}" + (", forcing" if forcing else "")


def archived_detail(archived_at: float, url: str) -> str:
    at = datetime.fromtimestamp(archived_at, timezone.utc).isoformat(timespec="seconds")
    return f"in the archive {url} since {at}"


def size_cap_detail(log_bytes: int, retention_bytes: int) -> str:
    return f"size {humanize_size(log_bytes)} > retention_bytes {humanize_size(retention_bytes)}"
