"""Why the planner keeps a segment: one rule per reason, each a pure function
``(segment, context) -> findings``, applied in the order of ``RULES``:

1. ``active``  2. ``no-trigger``  3. ``reserved`` / ``clock-step``  4. ``not-archived``
5. ``unconsumed:GROUP``  6. ``held``  7. ``prefix``  8. ``batch-limit``

A rule returns ``()`` when its reason does not apply, else one ``Finding`` per code (the unconsumed
rule one per protecting group). A finding keeps the segment (``KEEPS``), would keep it but is
overridden by what forces (``OVERRIDDEN``), or, for ``held`` only, notes that a deletion retries or
forces a held segment (``RETRIED``, ``FORCED``). ``apply_rules`` applies them all: a kept segment's
reasons are its ``KEEPS`` codes in rule order; docs/concepts.md (The rules, in order) says why that
order. Rules read their arguments and change nothing; a ``Context`` belongs to one walk.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import NamedTuple

from policies.archive_trust import not_archived_detail, unarchived_may_go
from policies.clock_guard import age_reason, clock_step_detail
from policies.config import PolicyConfig
from policies.plans import (UnconsumedRange, batch_detail, forced_detail, no_trigger_detail, prefix_detail,
                            reserved_detail, retried_detail, unconsumed_detail, waiting_detail)
from policies.reasons import (ACTIVE, BATCH_LIMIT, HELD, NOT_ARCHIVED, NO_TRIGGER, PREFIX, RESERVED,
                              unconsumed)
from policies.snapshot import LogSnapshot, SegmentSnapshot
from policies.triggers import SIZE_CAP

__all__ = [
    "FORCED", "KEEPS", "OVERRIDDEN", "RETRIED", "RULES", "Context", "Finding", "Rule", "Verdict", "active",
    "apply_rules", "batch_limit", "held", "no_trigger", "not_archived", "prefix", "unconsumed_by", "young",
]

KEEPS = "keeps"
OVERRIDDEN = "overridden"
RETRIED = "retried"
FORCED = "forced"


class Finding(NamedTuple):
    """A code a rule found for a segment, the facts its explanation is made of
    (``(formatter, *facts)``, the formatters of ``policies.plans``) and its effect."""

    code: str
    detail: tuple
    effect: str = KEEPS


class Context:
    """The walk of one log as it reaches a segment: the log's facts (fixed for the walk) and the
    pass's state there (updated by the walk before each segment, never by a rule)."""

    __slots__ = ("policy", "log", "triggers", "now", "wall", "protecting", "archiving", "is_last", "age", "ranges",
                 "forcing", "over_cap", "overridden_by", "left_bytes", "first_kept", "deleted")

    def __init__(self, policy: PolicyConfig, log: LogSnapshot, triggers: tuple[str, ...], now: float, wall: float,
                 protecting: frozenset[str], *, is_last: bool = False, age: float = 0.0,
                 ranges: tuple[UnconsumedRange, ...] = (), forcing: str | None = None, over_cap: bool = False,
                 overridden_by: str | None = None, left_bytes: int = 0, first_kept: str | None = None,
                 deleted: int = 0) -> None:
        self.policy = policy
        self.log = log
        self.triggers = triggers            # the log's active triggers (``LogPlan.triggers``)
        self.now = now                      # the trusted time (epoch seconds): ages, staleness, holds
        self.wall = wall                    # the wall clock's time
        self.protecting = protecting        # the groups whose unconsumed records keep segments
        self.archiving = policy.archive.enabled
        self.is_last = is_last              # the segment is the log's last
        self.age = age                      # seconds since its last write, at ``now``
        self.ranges = ranges                # what each consumer group has not consumed of it
        self.forcing = forcing              # the trigger forcing here (disk-force above force_target), or None
        self.over_cap = over_cap            # the bytes still left exceed retention_bytes
        self.overridden_by = overridden_by  # what forces deleting it whatever its age, or None
        self.left_bytes = left_bytes        # the log's bytes less those planned for deletion so far
        self.first_kept = first_kept        # the name of the first segment kept so far
        self.deleted = deleted              # segments planned for deletion so far


Rule = Callable[[SegmentSnapshot, Context], tuple[Finding, ...]]


def active(segment: SegmentSnapshot, context: Context) -> tuple[Finding, ...]:
    """The segment being written: flagged so, or the log's last one not sealed."""
    if segment.active or (context.is_last and not segment.sealed):
        return (Finding(ACTIVE, (str, "the segment being written")),)
    return ()


def no_trigger(segment: SegmentSnapshot, context: Context) -> tuple[Finding, ...]:
    """No trigger is active, or only a size cap the bytes left are within."""
    triggers = context.triggers
    if triggers and (triggers != (SIZE_CAP,) or context.over_cap):
        return ()
    policy = context.policy
    return (Finding(NO_TRIGGER, (no_trigger_detail, policy.delete_at_hours, context.log.disk.used_ratio,
                                 policy.disk.clean_ratio, policy.retention_bytes, context.left_bytes)),)


def young(segment: SegmentSnapshot, context: Context) -> tuple[Finding, ...]:
    """Younger than reserve (``reserved``), or only by a forward clock step (``clock-step``);
    overridden by what forces."""
    reserve = context.policy.reserve
    code = age_reason(context.age, context.wall - segment.mtime, reserve)
    if code is None:
        return ()
    detail = ((reserved_detail, reserve, context.age) if code == RESERVED
              else (clock_step_detail, context.wall - context.now, context.age))
    return (Finding(code, detail, OVERRIDDEN if context.overridden_by else KEEPS),)


def not_archived(segment: SegmentSnapshot, context: Context) -> tuple[Finding, ...]:
    """The log's archive tier does not hold it yet; overridden when the disk forces and the tier
    cannot be waited for (``policies.archive_trust``)."""
    if not context.archiving or segment.archived_at is not None:
        return ()
    log = context.log
    may_go = context.forcing is not None and unarchived_may_go(context.triggers, log.archive_up)
    return (Finding(NOT_ARCHIVED, (not_archived_detail, context.policy.archive.url, log.archive_doubt),
                    OVERRIDDEN if may_go else KEEPS),)


def unconsumed_by(segment: SegmentSnapshot, context: Context) -> tuple[Finding, ...]:
    """Each protecting group that has not consumed it (``unconsumed:GROUP``), overridden when the
    disk forces; an archived segment stays readable from the archive and is protected by none."""
    if not context.ranges or not context.protecting or (segment.archived_at is not None and context.archiving):
        return ()
    effect = OVERRIDDEN if context.forcing is not None else KEEPS
    return tuple(Finding(unconsumed(found.group), (unconsumed_detail, found), effect)
                 for found in context.ranges if found.group in context.protecting)


def held(segment: SegmentSnapshot, context: Context) -> tuple[Finding, ...]:
    """A reader held it at an earlier attempt: kept until ``retry_every`` since the last attempt
    passed, then retried; deleted even if held (forced) once ``force_after`` since the first."""
    hung = context.log.hung.get(segment.base_offset)
    if hung is None:
        return ()
    limits = context.policy.hung
    held_for = context.now - hung.first_attempt_at
    since_attempt = context.now - hung.last_attempt_at
    if held_for >= limits.force_after:
        return (Finding(HELD, (forced_detail, held_for, limits.force_after), FORCED),)
    if since_attempt >= limits.retry_every:
        return (Finding(HELD, (retried_detail, held_for, since_attempt), RETRIED),)
    return (Finding(HELD, (waiting_detail, held_for, limits.retry_every - since_attempt)),)


def prefix(segment: SegmentSnapshot, context: Context) -> tuple[Finding, ...]:
    """An older segment of the log is kept: deletion never leaves a hole."""
    if context.first_kept is None:
        return ()
    return (Finding(PREFIX, (prefix_detail, context.first_kept)),)


def batch_limit(segment: SegmentSnapshot, context: Context) -> tuple[Finding, ...]:
    """``files_per_pass`` deletions of the log are planned already."""
    limit = context.policy.files_per_pass
    return (Finding(BATCH_LIMIT, (batch_detail, limit)),) if context.deleted >= limit else ()


RULES: tuple[Rule, ...] = (active, no_trigger, young, not_archived, unconsumed_by, held, prefix, batch_limit)
"""Every rule, in the order they are applied and a kept segment's reasons are listed."""


class Verdict(NamedTuple):
    """What the rules found for one segment, in rule order: it goes when ``reasons`` is empty."""

    reasons: tuple[str, ...]            # the codes that keep it
    overridden: tuple[str, ...]         # the codes that would keep it, overridden by what forces
    details: Mapping[str, tuple]        # every code found: the facts of its explanation
    hold: str | None                    # RETRIED or FORCED: a held segment a deletion retries or forces


_NOTHING_FOUND = Verdict((), (), MappingProxyType({}), None)


def apply_rules(segment: SegmentSnapshot, context: Context) -> Verdict:
    """Every rule of ``RULES`` applied to ``segment``, in order."""
    found: list[Finding] = []
    for rule in RULES:
        found += rule(segment, context)
    if not found:
        return _NOTHING_FOUND
    reasons: list[str] = []
    overridden: list[str] = []
    details: dict[str, tuple] = {}
    hold = None
    for code, detail, effect in found:
        details[code] = detail
        if effect == KEEPS:
            reasons.append(code)
        elif effect == OVERRIDDEN:
            overridden.append(code)
        else:
            hold = effect
    return Verdict(tuple(reasons), tuple(overridden), details, hold)
