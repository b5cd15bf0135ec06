"""The planner: from snapshots, the policy in force for each log and the time, a delete-or-keep
decision for every segment.

``plan`` walks each log oldest first and applies the rules of ``policies.rules`` to each segment, in
their order: a segment goes when none keeps it; a kept one lists every reason that applies, each
sufficient on its own. Logs on one filesystem are walked together, oldest last write first (archived
segments first), and a disk force lasts while the projected used ratio is above ``force_target``.
docs/concepts.md (A pass) gives the rules and the walk in full.

``plan`` is pure and deterministic and its results are immutable, so it is thread-safe.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from types import MappingProxyType

from policies.byte_budgets import decide_budgets
from policies.clock_guard import judged_at
from policies.config import BudgetConfig, PolicyConfig
from policies.reasons import ACTIONS, DELETE, DELETED, FAILED, HUNG, KEEP  # re-exported
from policies.plans import LogPlan, Plan, SegmentDecision, UnconsumedRange, explain_codes  # re-exported
from policies.plans import (archived_detail, clean_detail, expired_detail, force_detail, manual_detail,
                            size_cap_detail, window_detail)
from policies.reasons import ARCHIVED, EXPIRED, HELD
from policies.rules import FORCED, Context, apply_rules
from policies.snapshot import DiskSnapshot, GroupSnapshot, LogSnapshot, SegmentSnapshot
from policies.triggers import (
    DISK_CLEAN,
    DISK_FORCE,
    TIME_WINDOW,
    MANUAL,
    NO_MANUAL_TRIGGER,
    SIZE_CAP,
    TRIGGERS,
    ManualTrigger,
    active_triggers,
    over_size_cap,
    require_aware,
)

__all__ = [
    "LogPlan",
    "Plan",
    "SegmentDecision",
    "UnconsumedRange",
    "explain_codes",
    "log_triggers",
    "plan",
    "segments_to_examine",
    "stale_groups",
]


def plan(
    logs: Sequence[LogSnapshot],
    in_force: Mapping[str, PolicyConfig],
    now: datetime,
    manual: Mapping[str, ManualTrigger] = MappingProxyType({}),
    trusted_now: datetime | None = None,
    budgets: Mapping[str, BudgetConfig] = MappingProxyType({}),
) -> Plan:
    """Decide every segment of ``logs`` at ``now``. ``in_force``: by log name, the policy in force for
    it (its policy with its ``overrides`` applied, ``RetentionConfig.policies_in_force``); ``manual``:
    open manual triggers by policy name (``LogSnapshot.policy``); ``trusted_now``: the time before a
    forward clock step, at which expiry and staleness are judged; ``budgets``: the shared byte budgets
    (``RetentionConfig.budgets``), decided after every log's own rules over the logs of each in ``logs``.

    Raises ``ValueError`` for a naive ``now`` or ``trusted_now``, a log absent from ``in_force`` or
    two logs with one name.
    """
    require_aware(now)
    judged = judged_at(now, trusted_now if trusted_now is None else require_aware(trusted_now))
    names = [log.name for log in logs]
    if len(set(names)) != len(names):
        raise ValueError(f"log names repeat: {sorted(names)}")
    walks = []
    for order, log in enumerate(logs):
        policy = in_force.get(log.name)
        if policy is None:
            raise ValueError(f"log {log.name} (policy {log.policy!r}) has no policy in force")
        walks.append(_LogWalk(order, log, policy, now, manual.get(log.policy, NO_MANUAL_TRIGGER), judged))
    filesystems: dict[int, list[_LogWalk]] = {}
    for walk in walks:
        filesystems.setdefault(walk.log.disk.filesystem_id, []).append(walk)
    for shared in filesystems.values():
        _walk_filesystem(shared)
    if budgets:
        decide_budgets(budgets, {walk.log.name: walk for walk in walks})
    return Plan(at=now, logs=tuple(walk.result() for walk in walks))


def log_triggers(policy: PolicyConfig, disk: DiskSnapshot, now: datetime, manual: ManualTrigger,
                 log_bytes: int) -> tuple[str, ...]:
    """A log's active triggers (``LogPlan.triggers``), in contract order: ``active_triggers``, and
    ``size-cap`` when its segment files take ``log_bytes``, above ``retention_bytes``."""
    triggers = active_triggers(policy, disk.used_ratio, now, manual, disk.forcing)
    if over_size_cap(policy, log_bytes):
        return tuple(t for t in TRIGGERS if t in triggers or t == SIZE_CAP)
    return triggers


def segments_to_examine(policy: PolicyConfig, disk: DiskSnapshot, now: datetime,
                        manual: ManualTrigger, budgeted: bool = False) -> int | None:
    """How many of a log's oldest segments ``plan`` needs (beside the last) to decide it as it would
    the whole log; None: all of them. A pass deletes at most ``files_per_pass`` and nothing without a
    trigger, so with none active the head stands for the log; a capped log's size needs every file,
    and so does the size of a log in a budget (``budgeted``)."""
    if policy.retention_bytes is not None or budgeted:
        return None
    return policy.files_per_pass + 1 if log_triggers(policy, disk, now, manual, 0) else 1   # uncapped: 0 bytes


def _walk_filesystem(walks: list[_LogWalk]) -> None:
    """Decide the segments of logs sharing one disk, archived ones first, then globally oldest first,
    tracking the bytes freed."""
    # Logs on one filesystem carry the same usage figures; the first log's snapshot stands for them all.
    disk = walks[0].log.disk
    capacity = disk.used_bytes + disk.free_bytes
    planned_bytes = 0
    # A heap of each walk's next segment: a pass over N logs costs N log N, not N squared. Keys are
    # unique (the walk's order is in them), so the walks are never compared.
    pending = [(walk.next_sort_key(), walk) for walk in walks if walk.has_next()]
    heapq.heapify(pending)
    while pending:
        _, walk = pending[0]
        projected_ratio = (disk.used_bytes - planned_bytes) / capacity if capacity > 0 else 0.0
        decision = walk.decide_next(projected_ratio)
        if decision.action == DELETE:
            planned_bytes += decision.bytes + decision.index_bytes
        if walk.has_next():
            heapq.heapreplace(pending, (walk.next_sort_key(), walk))
        else:
            heapq.heappop(pending)


def stale_groups(groups: Iterable[GroupSnapshot], now: float, consumer_ttl: float) -> tuple[str, ...]:
    """Names of the groups silent for longer than ``consumer_ttl`` at ``now`` (epoch seconds), sorted:
    they protect nothing (the deletion walk here, the tombstone rule of ``policies.liveness``)."""
    return tuple(sorted(g.name for g in groups if now - g.last_commit_at > consumer_ttl))


class _LogWalk:
    """The mutable state of one log's oldest-first walk during a single ``plan`` call."""

    def __init__(self, order: int, log: LogSnapshot, policy: PolicyConfig, now: datetime, manual: ManualTrigger,
                 judged: datetime):
        self.order = order
        self.log = log
        self.policy = policy
        self.now = judged.timestamp()      # ages, staleness and holds: the trusted time after a clock step
        self.wall = now.timestamp()
        self.at = now
        self.manual = manual
        self.log_bytes = sum(segment.size_bytes for segment in log.segments)
        self.triggers = log_triggers(policy, log.disk, now, manual, self.log_bytes)
        self.freed_bytes = 0
        # Only disk-force forces: with disk.force off, refuse-writes turns writers away instead.
        self.forcing_trigger = DISK_FORCE if DISK_FORCE in self.triggers else None
        self.stale_groups = stale_groups(log.groups, self.now, policy.consumer_ttl)
        self.protecting = (frozenset(g.name for g in log.groups if g.name not in self.stale_groups)
                           if policy.protect_unconsumed else frozenset())
        self.groups_by_name = tuple(sorted(log.groups, key=lambda g: g.name))
        self.index = 0
        self.deleted = 0
        self.first_kept: str | None = None
        self.decisions: list[SegmentDecision] = []
        self.archive = policy.archive
        self.force_target = policy.disk.force_target_ratio
        self.manual_forcing = manual.forcing
        self.context = Context(policy, log, self.triggers, self.now, self.wall, self.protecting)

    def has_next(self) -> bool:
        return self.index < len(self.log.segments)

    def next_sort_key(self) -> tuple[bool, float, int, int]:
        segment = self.log.segments[self.index]
        unarchived = self.archive.enabled and segment.archived_at is None
        return (unarchived, segment.mtime, self.order, segment.base_offset)

    def decide_next(self, projected_ratio: float) -> SegmentDecision:
        segment = self.log.segments[self.index]
        is_last = self.index == len(self.log.segments) - 1
        self.index += 1
        decision = self._decide(segment, is_last, projected_ratio)
        if decision.action == DELETE:
            self.deleted += 1
            self.freed_bytes += segment.size_bytes
        elif self.first_kept is None:
            self.first_kept = segment.name
        self.decisions.append(decision)
        return decision

    def _decide(self, segment: SegmentSnapshot, is_last: bool, projected_ratio: float) -> SegmentDecision:
        """Apply the rules (``policies.rules``) to ``segment``: it goes when none keeps it."""
        context = self._context(segment, is_last, projected_ratio)
        reasons, overridden, details, hold = apply_rules(segment, context)
        deleting = not reasons
        because: tuple[str, ...] = ()
        # A delete explains why it goes, what it overrode and any earlier hold; a keep its reasons.
        if deleting:
            because, facts = self._deletion(segment, context, projected_ratio, details, overridden, hold)
        else:   # the codes found, less any a force overrode or a hold that waits no more
            facts = details if len(details) == len(reasons) else \
                {code: fact for code, fact in details.items() if code in reasons}
        return SegmentDecision(
            log=self.log.name,
            base_offset=segment.base_offset,
            end_offset=segment.end_offset,
            path=segment.path,
            bytes=segment.size_bytes,
            action=DELETE if deleting else KEEP,
            reasons=reasons,
            because=because,
            forced=deleting and hold == FORCED,
            retry=deleting and hold is not None,
            unconsumed=context.ranges,
            overridden=overridden if deleting else (),
            overridden_by=context.overridden_by if deleting and overridden else None,
            age_seconds=context.age,
            used_bytes=segment.used_bytes,
            live_bytes=segment.live_bytes,
            index_bytes=segment.index_bytes,
            detail_facts=MappingProxyType(facts),
        )

    def _context(self, segment: SegmentSnapshot, is_last: bool, projected_ratio: float) -> Context:
        """The walk's state as it reaches ``segment``, for the rules: ``self.context``, updated."""
        context = self.context
        # Pressure forces until the projected ratio is back at or below the low-water mark.
        forcing = self.forcing_trigger if self.forcing_trigger is not None and projected_ratio > self.force_target \
            else None
        context.left_bytes = left_bytes = self.log_bytes - self.freed_bytes
        context.over_cap = over_cap = over_size_cap(self.policy, left_bytes)
        context.forcing = forcing
        context.overridden_by = forcing or (SIZE_CAP if over_cap else MANUAL if self.manual_forcing else None)
        context.is_last = is_last
        context.age = self.now - segment.mtime
        context.ranges = tuple(found for found in (_unconsumed_range(group, segment) for group in self.groups_by_name)
                               if found is not None) if self.groups_by_name else ()
        context.first_kept = self.first_kept
        context.deleted = self.deleted
        return context

    def _deletion(self, segment: SegmentSnapshot, context: Context, projected_ratio: float, found: Mapping[str, tuple],
                  overridden: tuple[str, ...], hold: str | None) -> tuple[tuple[str, ...], dict[str, tuple]]:
        """Why ``segment`` goes (``because``), and the facts its deletion shows: those ``found`` by the
        rules it overrode or that held it before, then those of why it goes."""
        policy = self.policy
        because = self._because(context.age, context.overridden_by, context.forcing is not None, context.over_cap)
        facts = {code: fact for code, fact in found.items() if code in overridden or code == HELD} if found else {}
        if EXPIRED in because:
            facts[EXPIRED] = (expired_detail, context.age, policy.reserve)
        if context.forcing is not None:
            facts[context.forcing] = (force_detail, projected_ratio, self.force_target)
        if context.over_cap:
            facts[SIZE_CAP] = (size_cap_detail, context.left_bytes, policy.retention_bytes)
        if segment.archived_at is not None and self.archive.enabled:
            because = (*because, ARCHIVED)
            facts[ARCHIVED] = (archived_detail, segment.archived_at, self.archive.url)
        if TIME_WINDOW in because:
            facts[TIME_WINDOW] = (window_detail, policy, self.at)
        if DISK_CLEAN in because:
            facts[DISK_CLEAN] = (clean_detail, self.log.disk.used_ratio, policy.disk.clean_ratio)
        if MANUAL in because:
            facts[MANUAL] = (manual_detail, self.manual.remaining, self.manual.forcing)
        return because, facts

    def _because(self, age: float, overridden_by: str | None, force_disk: bool, over_cap: bool) -> tuple[str, ...]:
        """Why a segment goes: ``expired`` unless it is younger than reserve, and the triggers that let
        this deletion happen (a forcing one alone when it forces)."""
        if overridden_by is not None:
            return (overridden_by,) if age < self.policy.reserve else (EXPIRED, overridden_by)
        triggers = tuple(t for t in self.triggers
                         if (t != SIZE_CAP or over_cap) and (t != DISK_FORCE or force_disk))
        return (EXPIRED, *triggers)

    def result(self) -> LogPlan:
        return LogPlan(
            name=self.log.name,
            path=self.log.path,
            policy=self.log.policy,
            disk=self.log.disk,
            triggers=self.triggers,
            decisions=tuple(self.decisions),
            stale_groups=self.stale_groups,
        )


def _unconsumed_range(group: GroupSnapshot, segment: SegmentSnapshot) -> UnconsumedRange | None:
    first = max(segment.base_offset, group.committed_offset)
    if first >= segment.end_offset:
        return None
    return UnconsumedRange(group.name, first, segment.end_offset)
