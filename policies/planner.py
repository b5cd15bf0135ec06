"""The planner: from snapshots, policies and the time, a delete-or-keep decision for every segment.

Rules, per log (``plan`` applies them; every input is plain data and nothing is read or changed):

- Nothing is deleted without an active trigger (``no-trigger``).
- A log whose segment files take more than ``retention_bytes`` has the ``size-cap`` trigger: its
  oldest segments go, unexpired ones too (``reserved`` overridden by ``size-cap``), until the bytes
  left are within the cap; then the cap justifies nothing more. Unconsumed segments, held ones, the
  active segment, the prefix rule and ``files_per_pass`` still keep segments, as for any trigger.
- A segment expires ``reserve`` after its last write. Only expired segments go, unless the pass
  forces: ``disk-force`` (``disk.force`` on) or a manual trigger with force, which take the oldest
  segments whatever their age. With ``disk.force`` off nothing forces: above
  ``refuse_writes_ratio`` the writers are refused and only expired, consumed segments go.
- With a *trusted now* (``trusted_now``, earlier than ``now``: the wall clock stepped forward),
  expiry and group staleness are judged at it, not at ``now``: a segment expired only by the step is
  kept (``clock-step``) unless what overrides ``reserved`` forces (``policies.clock_guard``).
- With ``protect_unconsumed``, a segment holding an offset a consumer group has not consumed is kept
  (``unconsumed:GROUP``) unless the disk forces; a manual force does not override this. A group silent
  for longer than ``consumer_ttl`` protects nothing and is reported as stale.
- The last segment is never deleted (``active``): it is the one being written, whether or not the
  snapshot flags it, since a writer in another process may be appending to it.
- The walk goes oldest first and never leaves a hole: once a segment is kept, every later one is kept
  too (``prefix``). At most ``files_per_pass`` segments go per log per pass (``batch-limit``).
- A segment an earlier attempt found held by a reader is kept (``held``) until ``retry_every`` has
  passed since the last attempt; after ``force_after`` since the first attempt it is deleted even if
  still held (``forced``).
- A log whose policy has an archive tier (``archive.url``) evicts archived segments only: one the
  tier does not hold whole yet is kept (``not-archived``) unless the disk forces and the tier is
  down or did not keep up (``policies.archive_trust``). The walk of a
  filesystem takes the archived segments at the logs' heads before any unarchived one, so a force
  evicts what the archive holds first and loses data only when that is not enough. An archived
  segment's deletion says so (``archived`` in ``because``). A consumer group's unconsumed records do
  not keep an archived segment: they stay readable through the archive, whose total retention
  protects them (``commitlog.archive``; ``policies.archive_expiry``).
- Logs on one filesystem (the same ``filesystem_id``) are walked together in global age order, oldest
  last write first, each from its own head. A log's disk force lasts while the projected used ratio,
  the used bytes less those planned for deletion so far over used plus free, is above its
  ``force_target`` (the low-water mark; ``clean_ratio`` when unset), so a forced pass leaves room below
  ``force_ratio`` for the writer it let resume; then its segments follow the unforced rules.

A kept segment lists every reason that applies to it, each sufficient on its own. ``plan`` is pure and
deterministic, and its results are immutable, so it is thread-safe.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from types import MappingProxyType

from policies.clock_guard import age_reason, clock_step_detail, judged_at
from policies.plan_details import (archived_detail, batch_detail, clean_detail, expired_detail, force_detail,
                                    forced_detail, manual_detail, no_trigger_detail, prefix_detail,
                                    reserved_detail, retried_detail, size_cap_detail, unconsumed_detail,
                                    waiting_detail, window_detail)
from policies.archive_trust import not_archived_detail, unarchived_may_go
from policies.config import PolicyConfig
from policies.outcomes import ACTIONS, DELETE, DELETED, FAILED, HUNG, KEEP  # re-exported
from policies.plans import LogPlan, Plan, SegmentDecision, UnconsumedRange, explain_codes  # re-exported
from policies.reasons import (ACTIVE, ARCHIVED, BATCH_LIMIT, EXPIRED, HELD, NOT_ARCHIVED, NO_TRIGGER,
                              PREFIX, RESERVED, unconsumed)
from policies.snapshot import GroupSnapshot, LogSnapshot, SegmentSnapshot
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
    "ACTIONS",
    "DELETE",
    "DELETED",
    "FAILED",
    "HUNG",
    "KEEP",
    "LogPlan",
    "Plan",
    "SegmentDecision",
    "UnconsumedRange",
    "explain_codes",
    "plan",
    "stale_groups",
]


def plan(
    logs: Sequence[LogSnapshot],
    policies: Mapping[str, PolicyConfig],
    now: datetime,
    manual: Mapping[str, ManualTrigger] = MappingProxyType({}),
    in_force: Mapping[str, PolicyConfig] = MappingProxyType({}),
    trusted_now: datetime | None = None,
) -> Plan:
    """Decide every segment of ``logs`` at ``now``; ``manual`` holds open manual triggers by policy name;
    ``in_force``: by log name, the policy a log's ``overrides`` make of its own (``policy_for``);
    ``trusted_now``: the time before a forward clock step, at which expiry and staleness are judged.

    Raises ``ValueError`` for a naive ``now`` or ``trusted_now``, a log naming a policy absent from
    ``policies`` or two logs with one name.
    """
    require_aware(now)
    judged = judged_at(now, trusted_now if trusted_now is None else require_aware(trusted_now))
    names = [log.name for log in logs]
    if len(set(names)) != len(names):
        raise ValueError(f"log names repeat: {sorted(names)}")
    walks = []
    for order, log in enumerate(logs):
        if log.policy not in policies:
            raise ValueError(f"log {log.name} names policy {log.policy!r}, which is not configured")
        walks.append(_LogWalk(order, log, in_force.get(log.name, policies[log.policy]), now,
                              manual.get(log.policy, NO_MANUAL_TRIGGER), judged))
    filesystems: dict[int, list[_LogWalk]] = {}
    for walk in walks:
        filesystems.setdefault(walk.log.disk.filesystem_id, []).append(walk)
    for shared in filesystems.values():
        _walk_filesystem(shared)
    return Plan(at=now, logs=tuple(walk.result() for walk in walks))


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
        self.triggers = active_triggers(policy, log.disk.used_ratio, now, manual, log.disk.forcing)
        self.log_bytes = sum(segment.size_bytes for segment in log.segments)
        if over_size_cap(policy, self.log_bytes):
            self.triggers = tuple(t for t in TRIGGERS if t in self.triggers or t == SIZE_CAP)
        self.freed_bytes = 0
        # Only disk-force forces: with disk.force off, refuse-writes turns writers away instead.
        self.forcing_trigger = DISK_FORCE if DISK_FORCE in self.triggers else None
        self.stale_groups = stale_groups(log.groups, self.now, policy.consumer_ttl)
        self.protecting = (
            tuple(sorted((g for g in log.groups if g.name not in self.stale_groups), key=lambda g: g.name))
            if policy.protect_unconsumed
            else ()
        )
        self.groups_by_name = tuple(sorted(log.groups, key=lambda g: g.name))
        self.index = 0
        self.deleted = 0
        self.first_kept: str | None = None
        self.decisions: list[SegmentDecision] = []
        self.archive = policy.archive

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
        policy = self.policy
        # Pressure forces until the projected ratio is back at or below the low-water mark.
        target = policy.disk.force_target_ratio
        force_disk = self.forcing_trigger is not None and projected_ratio > target
        left_bytes = self.log_bytes - self.freed_bytes
        over_cap = over_size_cap(policy, left_bytes)
        overridden_by = (self.forcing_trigger if force_disk else SIZE_CAP if over_cap
                         else MANUAL if self.manual.forcing else None)
        age = self.now - segment.mtime
        reasons: list[str] = []
        overridden: list[str] = []
        details: dict[str, tuple] = {}

        if segment.active or (is_last and not segment.sealed):
            reasons.append(ACTIVE)
            details[ACTIVE] = (str, "the segment being written")
        if not self.triggers or (self.triggers == (SIZE_CAP,) and not over_cap):
            reasons.append(NO_TRIGGER)
            details[NO_TRIGGER] = (no_trigger_detail, policy.delete_at_hours, self.log.disk.used_ratio,
                                   policy.disk.clean_ratio, policy.retention_bytes, left_bytes)
        young = age_reason(age, self.wall - segment.mtime, policy.reserve)
        if young is not None:
            (overridden if overridden_by else reasons).append(young)
            details[young] = ((reserved_detail, policy.reserve, age) if young == RESERVED
                              else (clock_step_detail, self.wall - self.now, age))

        if self.archive.enabled and segment.archived_at is None:
            may_go = force_disk and unarchived_may_go(self.triggers, self.log.archive_up)
            (overridden if may_go else reasons).append(NOT_ARCHIVED)
            details[NOT_ARCHIVED] = (not_archived_detail, self.archive.url, self.log.archive_doubt)

        ranges = tuple(_unconsumed_range(group, segment) for group in self.groups_by_name)
        ranges = tuple(found for found in ranges if found is not None)
        # An archived segment stays readable from the archive: a group's protection is the archive's.
        protected = () if self.archive.enabled and segment.archived_at is not None else \
            {group.name for group in self.protecting}
        for found in ranges:
            if found.group in protected:
                code = unconsumed(found.group)
                (overridden if force_disk else reasons).append(code)
                details[code] = (unconsumed_detail, found)

        forced = retry = False
        hung = self.log.hung.get(segment.base_offset)
        if hung is not None:
            held_for = self.now - hung.first_attempt_at
            since_attempt = self.now - hung.last_attempt_at
            if held_for >= policy.hung.force_after:
                forced = retry = True
                details[HELD] = (forced_detail, held_for, policy.hung.force_after)
            elif since_attempt >= policy.hung.retry_every:
                retry = True
                details[HELD] = (retried_detail, held_for, since_attempt)
            else:
                reasons.append(HELD)
                details[HELD] = (waiting_detail, held_for, policy.hung.retry_every - since_attempt)

        if self.first_kept is not None:
            reasons.append(PREFIX)
            details[PREFIX] = (prefix_detail, self.first_kept)
        if self.deleted >= policy.files_per_pass:
            reasons.append(BATCH_LIMIT)
            details[BATCH_LIMIT] = (batch_detail, policy.files_per_pass)

        deleting = not reasons
        because: tuple[str, ...] = ()
        # A delete explains why it goes, what it overrode and any earlier hold; a keep its reasons.
        shown = set(reasons)
        if deleting:
            shown.update(overridden)
            because = self._because(age, overridden_by, force_disk, over_cap)
            shown.update(because)
            if EXPIRED in because:
                details[EXPIRED] = (expired_detail, age, policy.reserve)
            if force_disk:
                details[self.forcing_trigger] = (force_detail, projected_ratio, target)
            if retry:
                shown.add(HELD)
            if over_cap:
                details[SIZE_CAP] = (size_cap_detail, left_bytes, policy.retention_bytes)
                shown.add(SIZE_CAP)
            if segment.archived_at is not None and self.archive.enabled:
                because = (*because, ARCHIVED)
                shown.add(ARCHIVED)
                details[ARCHIVED] = (archived_detail, segment.archived_at, self.archive.url)
            details[TIME_WINDOW] = (window_detail, policy, self.at)
            details[DISK_CLEAN] = (clean_detail, self.log.disk.used_ratio, policy.disk.clean_ratio)
            details[MANUAL] = (manual_detail, self.manual.remaining, self.manual.forcing)
        return SegmentDecision(
            log=self.log.name,
            base_offset=segment.base_offset,
            end_offset=segment.end_offset,
            path=segment.path,
            bytes=segment.size_bytes,
            action=DELETE if deleting else KEEP,
            reasons=tuple(reasons),
            because=because,
            forced=forced and deleting,
            retry=retry and deleting,
            unconsumed=ranges,
            overridden=tuple(overridden) if deleting else (),
            overridden_by=overridden_by if deleting and overridden else None,
            age_seconds=age,
            used_bytes=segment.used_bytes,
            live_bytes=segment.live_bytes,
            index_bytes=segment.index_bytes,
            detail_facts=MappingProxyType({code: fact for code, fact in details.items() if code in shown}),
        )

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
