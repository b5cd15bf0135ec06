"""Shared byte budgets: which log gives up which segment, in what order, while the logs of a budget
(``budgets:`` in the configuration) take more than its bytes together.

The choice (:func:`budget_picks`) is over each log's size and its *deletable* segments, oldest
first: while the total is over the budget, the log furthest above its share (``bytes x weight /
total weight``, never below its floor) gives up its oldest deletable segment; an archived one goes
before any unarchived one, ties go to the older segment, then to the log named first. A log at or
below its share gives up nothing, so the total fits within one segment per log unless protected
segments stand in the way. :func:`decide_budgets` applies it to the planner's walks after every
log's own rules: a segment already going counts, and a segment is deletable when it is kept only by
``reserved``, ``clock-step``, ``no-trigger`` or ``prefix`` (never ``active``, ``unconsumed:GROUP``,
``not-archived``, ``held`` or ``batch-limit``: as for ``retention_bytes``). docs/concepts.md
(Shared byte budgets) says it in words. Pure and deterministic; thread-safe.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, MutableSequence, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Protocol

from policies.config import BudgetConfig, PolicyConfig
from policies.plans import SegmentDecision, archived_detail, expired_detail, prefix_detail
from policies.reasons import ARCHIVED, CLOCK_STEP, DELETE, EXPIRED, NO_TRIGGER, PREFIX, RESERVED
from policies.snapshot import LogSnapshot, SegmentSnapshot
from policies.triggers import BUDGET, TRIGGERS
from policies.units import humanize_size

__all__ = ["BUDGET_OVERRIDES", "BudgetCandidate", "BudgetLog", "BudgetPick", "budget_detail", "budget_picks",
           "decide_budgets"]

BUDGET_OVERRIDES = frozenset({RESERVED, CLOCK_STEP})
"""The reasons to keep a budget overrides (it deletes whatever the segment's age)."""
_DELETABLE = BUDGET_OVERRIDES | {NO_TRIGGER, PREFIX}


@dataclass(frozen=True)
class BudgetCandidate:
    """A segment a log may give up for its budget. Immutable."""

    bytes: int
    age: float
    """Seconds since its last write: on a tie the older goes first."""
    archived: bool = False
    """The log's archive tier holds it: archived segments go before any unarchived one."""


@dataclass(frozen=True)
class BudgetLog:
    """One log of a budget as the choice sees it. Immutable."""

    name: str
    size: int
    """Bytes its segment files take, less those already going."""
    share: int
    candidates: tuple[BudgetCandidate, ...]
    """Its deletable segments, oldest first (each can go only once those before it go)."""


@dataclass(frozen=True)
class BudgetPick:
    """A segment a log gives up, with the figures as it went. Immutable."""

    log: str
    index: int
    """Into the log's ``candidates``."""
    log_bytes: int
    """The log's size before giving it up."""
    share: int
    used: int
    """The budget's total before it."""


def budget_picks(budget_bytes: int, logs: Sequence[BudgetLog]) -> tuple[BudgetPick, ...]:
    """The segments ``logs`` give up, in order, until their total is at most ``budget_bytes`` or no
    log above its share has a deletable segment left (see the module docstring)."""
    used = sum(log.size for log in logs)
    sizes = {log.name: log.size for log in logs}
    taken = dict.fromkeys(sizes, 0)
    order = {log.name: position for position, log in enumerate(logs)}
    # Two heaps, archived next candidates first; each log is in at most one, keyed by how far it is
    # above its share (then the older segment, then the log named first).
    heaps: tuple[list, list] = ([], [])

    def push(log: BudgetLog) -> None:
        index, excess = taken[log.name], sizes[log.name] - log.share
        if excess > 0 and index < len(log.candidates):
            candidate = log.candidates[index]
            heapq.heappush(heaps[0 if candidate.archived else 1],
                           (-excess, -candidate.age, order[log.name], log))

    for log in logs:
        push(log)
    picks = []
    while used > budget_bytes and (heaps[0] or heaps[1]):
        _, _, _, log = heapq.heappop(heaps[0] or heaps[1])
        index = taken[log.name]
        picks.append(BudgetPick(log.name, index, sizes[log.name], log.share, used))
        gone = log.candidates[index].bytes
        sizes[log.name] -= gone
        used -= gone
        taken[log.name] = index + 1
        push(log)
    return tuple(picks)


def budget_detail(budget: str, log: str, log_bytes: int, share: int, budget_bytes: int, used: int) -> str:
    """The words of a budget deletion: ``log a: 142.0GiB, share 150.0GiB; budget shared 300.0GiB, 318.0GiB used``."""
    return (f"log {log}: {humanize_size(log_bytes)}, share {humanize_size(share)}; "
            f"budget {budget} {humanize_size(budget_bytes)}, {humanize_size(used)} used")


class BudgetWalk(Protocol):
    """What :func:`decide_budgets` reads and changes of one log's walk (the planner's)."""

    log: LogSnapshot
    policy: PolicyConfig
    decisions: MutableSequence[SegmentDecision]
    triggers: tuple[str, ...]
    log_bytes: int
    freed_bytes: int
    deleted: int


def decide_budgets(budgets: Mapping[str, BudgetConfig], walks: Mapping[str, BudgetWalk]) -> None:
    """Turn into deletions what each budget needs of the walked logs (``walks``, by log name, every
    segment decided by the log's own rules): ``budget`` joins the triggers of each log of a budget
    whose logs take more than its bytes. Logs of a budget absent from ``walks`` count for nothing."""
    for name, budget in budgets.items():
        members = [walks[log] for log in budget.logs if log in walks]
        if not members or sum(walk.log_bytes for walk in members) <= budget.bytes:
            continue
        for walk in members:
            walk.triggers = tuple(t for t in TRIGGERS if t in walk.triggers or t == BUDGET)
        first_kept = {walk.log.name: walk.deleted for walk in members}
        logs = [BudgetLog(walk.log.name, walk.log_bytes - walk.freed_bytes, budget.share(walk.log.name),
                          _candidates(walk)) for walk in members]
        by_name = {walk.log.name: walk for walk in members}
        for pick in budget_picks(budget.bytes, logs):
            walk = by_name[pick.log]
            at = first_kept[pick.log] + pick.index
            decision = walk.decisions[at]
            walk.decisions[at] = _budget_deletion(decision, walk.log.segments[at], walk.policy, name, budget, pick)
            walk.deleted += 1
            walk.freed_bytes += decision.bytes
        for walk in members:
            if walk.deleted > first_kept[walk.log.name]:
                _renew_prefix(walk)


def _renew_prefix(walk: BudgetWalk) -> None:
    """After a budget's deletions, the log's first kept segment is kept for no ``prefix`` and the
    later ones name it as their prefix."""
    kept = walk.decisions[walk.deleted:]
    if not kept:
        return
    first = kept[0].segment
    for at, decision in enumerate(kept, start=walk.deleted):
        if PREFIX not in decision.reasons:
            continue
        facts = dict(decision.detail_facts)
        if at == walk.deleted:
            facts.pop(PREFIX, None)
            reasons = tuple(code for code in decision.reasons if code != PREFIX)
        else:
            facts[PREFIX], reasons = (prefix_detail, first), decision.reasons
        walk.decisions[at] = replace(decision, reasons=reasons, detail_facts=MappingProxyType(facts))


def _candidates(walk: BudgetWalk) -> tuple[BudgetCandidate, ...]:
    """The log's kept segments after those going, while each is kept only by what a budget
    overrides, at most what ``files_per_pass`` leaves."""
    found = []
    room = walk.policy.files_per_pass - walk.deleted
    archiving = walk.policy.archive.enabled
    for decision, segment in zip(walk.decisions[walk.deleted:], walk.log.segments[walk.deleted:]):
        if len(found) >= room or decision.action == DELETE or not set(decision.reasons) <= _DELETABLE:
            break
        found.append(BudgetCandidate(decision.bytes, decision.age_seconds,
                                     archiving and segment.archived_at is not None))
    return tuple(found)


def _budget_deletion(decision: SegmentDecision, segment: SegmentSnapshot, policy: PolicyConfig, name: str,
                     budget: BudgetConfig, pick: BudgetPick) -> SegmentDecision:
    """``decision`` (a keep of ``segment``) turned into the deletion the budget makes of it."""
    overridden = tuple(code for code in decision.reasons if code in BUDGET_OVERRIDES)
    facts = {code: decision.detail_facts[code] for code in overridden if code in decision.detail_facts}
    because: tuple[str, ...] = (BUDGET,)
    if decision.age_seconds >= policy.reserve:
        because = (EXPIRED, BUDGET)
        facts[EXPIRED] = (expired_detail, decision.age_seconds, policy.reserve)
    facts[BUDGET] = (budget_detail, name, pick.log, pick.log_bytes, pick.share, budget.bytes, pick.used)
    if policy.archive.enabled and segment.archived_at is not None:
        because = (*because, ARCHIVED)
        facts[ARCHIVED] = (archived_detail, segment.archived_at, policy.archive.url)
    return replace(decision, action=DELETE, reasons=(), because=because, overridden=overridden,
                   overridden_by=BUDGET if overridden else None, detail_facts=MappingProxyType(facts))
