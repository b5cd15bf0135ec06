"""Triggers: the conditions under which a pass may delete anything at all (names are a contract).

- ``time-window``: the hour of ``now`` in the policy's time zone is one of ``delete_at_hours``.
- ``disk-clean``: the disk's used ratio is above ``clean_ratio``; expired segments go at any hour.
- ``disk-force``: the ratio is above ``force_ratio`` and ``disk.force`` is on; the oldest segments go
  even unexpired or unconsumed.
- ``refuse-writes``: the ratio is above ``refuse_writes_ratio``; writers are refused and expired
  segments go at any hour. It never forces by itself: with ``disk.force`` off nothing unexpired or
  unconsumed goes (the promise of ``disk.force: false``; the refused writers wait instead). With
  ``disk.force`` on, ``disk-force`` is active as well and forces.
- A disk force under way (the scheduler's back-to-back passes) keeps ``disk-force`` active until the
  ratio is at or below ``force_target`` (hysteresis, as writers resume only below ``force_ratio``).
- ``manual``: an operator asked for cleanup and passes of it remain.
- ``size-cap``: the log's segment files take more than the policy's ``retention_bytes``; its oldest
  segments go at any hour and whatever their age (never unconsumed ones: only the disk forces
  those), down to the cap. A trigger of one log, from its own size (:func:`over_size_cap`).
- ``budget``: a shared byte budget's logs take more than its bytes together (:mod:`policies.byte_budgets`).

Each trigger is declared once, a member of :class:`Trigger` (the module-level names are those
members). Every function is pure: the time and the disk usage are inputs, so they are thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from types import MappingProxyType

from policies.config import DiskConfig, PolicyConfig

__all__ = [
    "BUDGET",
    "DISK_CLEAN",
    "DISK_FORCE",
    "MANUAL",
    "NO_MANUAL_TRIGGER",
    "REFUSE_WRITES",
    "SIZE_CAP",
    "TIME_WINDOW",
    "TRIGGERS",
    "TRIGGER_DOCS",
    "ManualTrigger",
    "Trigger",
    "active_triggers",
    "disk_forces",
    "disk_triggers",
    "force_continues",
    "in_delete_window",
    "local_hour",
    "next_delete_window",
    "over_size_cap",
    "require_aware",
]


class Trigger(StrEnum):
    """A condition under which a pass may delete (its value is what output shows), in the order a plan
    lists the active ones."""

    TIME_WINDOW = "time-window"
    DISK_CLEAN = "disk-clean"
    DISK_FORCE = "disk-force"
    REFUSE_WRITES = "refuse-writes"
    MANUAL = "manual"
    SIZE_CAP = "size-cap"
    BUDGET = "budget"


TIME_WINDOW, DISK_CLEAN, DISK_FORCE = Trigger.TIME_WINDOW, Trigger.DISK_CLEAN, Trigger.DISK_FORCE
REFUSE_WRITES, MANUAL, SIZE_CAP = Trigger.REFUSE_WRITES, Trigger.MANUAL, Trigger.SIZE_CAP
BUDGET = Trigger.BUDGET
TRIGGERS = tuple(Trigger)
"""Every trigger, in the order a plan lists the active ones."""

TRIGGER_DOCS = MappingProxyType({
    TIME_WINDOW: "the hour now, in the policy's `timezone`, is one of `delete_at_hours`: expired segments go",
    DISK_CLEAN: "the disk's used ratio is above `disk.clean_ratio`: expired segments go at any hour",
    DISK_FORCE: "the used ratio is above `disk.force_ratio` and `disk.force` is on: the oldest segments go, "
    "even unexpired or unconsumed, until the projected ratio is at `disk.force_target`",
    REFUSE_WRITES: "the used ratio is above `disk.refuse_writes_ratio`: writers are refused and expired "
    "segments go at any hour; it forces nothing itself (with `disk.force: false` nothing unexpired or "
    "unconsumed goes)",
    MANUAL: "an operator asked for a pass: `retention clean --config` runs exactly one, `POST /clean` "
    "(`retention clean --url`) opens `manual_passes` of them, the first at once: expired segments go at any "
    "hour; with force, unexpired ones too",
    SIZE_CAP: "the log's segment files take more than `retention_bytes`: its oldest segments go, whatever "
    "their age, down to the cap (never unconsumed ones)",
    BUDGET: "the logs of a shared byte budget (`budgets:`) take more than its `bytes` together: the log "
    "furthest above its share gives up its oldest segments first, whatever their age, until the total fits "
    "(never unconsumed ones)",
})
"""Every trigger with a one-line explanation of when it is active and what it deletes."""


@dataclass(frozen=True)
class ManualTrigger:
    """The state of an operator's cleanup request for one policy. Immutable; every change is a new value.

    ``remaining`` passes ignore the hour window (RocketMQ's ``manualDeleteFileSeveralTimes``).
    ``force`` additionally lets those passes delete segments younger than ``reserve``; it does not
    override consumer protection, which only disk pressure may do: an operator in a hurry should not
    silently drop a consumer's data, whereas a full disk leaves no choice.
    """

    remaining: int = 0
    force: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.remaining, bool) or not isinstance(self.remaining, int) or self.remaining < 0:
            raise ValueError(f"remaining must be a non-negative integer, got {self.remaining!r}")

    @classmethod
    def open(cls, manual_passes: int, force: bool = False) -> ManualTrigger:
        """Return a trigger for a fresh request: ``manual_passes`` passes, replacing any earlier request."""
        if manual_passes <= 0:
            raise ValueError(f"manual_passes must be positive, got {manual_passes}")
        return cls(remaining=manual_passes, force=force)

    @property
    def active(self) -> bool:
        """True while passes remain."""
        return self.remaining > 0

    @property
    def forcing(self) -> bool:
        """True while passes remain that may delete unexpired segments."""
        return self.active and self.force

    def after_pass(self) -> ManualTrigger:
        """Return this trigger with one pass consumed; an exhausted trigger stays exhausted and unforced."""
        remaining = max(self.remaining - 1, 0)
        return replace(self, remaining=remaining, force=self.force and remaining > 0)


NO_MANUAL_TRIGGER = ManualTrigger()
"""No manual request is open."""


def require_aware(now: datetime) -> datetime:
    """Return ``now`` if it carries a time zone; a naive time has no defined hour or instant here."""
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError(f"now must be an aware datetime (with a time zone), got {now!r}")
    return now


def local_hour(policy: PolicyConfig, now: datetime) -> int:
    """The hour of ``now`` on the clock of the policy's time zone (the machine's local time when None)."""
    require_aware(now)
    zone = policy.zone
    # astimezone() without an argument converts to the machine's local time zone.
    return (now.astimezone(zone) if zone is not None else now.astimezone()).hour


def next_delete_window(policy: PolicyConfig, now: datetime) -> datetime | None:
    """When the policy's delete window is next open: ``now`` while it is, else the start of the next
    delete hour (within two days, DST included); None for a policy without delete hours."""
    require_aware(now)
    if not policy.delete_at_hours:
        return None
    # Every zone's offset is a multiple of 15 minutes, so a local hour starts on this UTC grid.
    step = timedelta(minutes=15)
    start = now - timedelta(minutes=now.minute % 15, seconds=now.second, microseconds=now.microsecond)
    for k in range(4 * 49):
        candidate = start + k * step
        if local_hour(policy, candidate) in policy.delete_at_hours:
            return max(candidate, now)
    return None   # unreachable: some delete hour comes within two days


def in_delete_window(policy: PolicyConfig, now: datetime) -> bool:
    """True when the local hour of ``now`` is one of the policy's ``delete_at_hours``.

    The check is on the wall-clock hour after converting the instant, so it follows DST: an hour
    skipped when clocks go forward (02:00 in Europe/Berlin on the last Sunday of March) never comes
    that day, and an hour repeated when they go back (02:00 on the last Sunday of October) opens the
    window for both occurrences, two real hours.
    """
    return local_hour(policy, now) in policy.delete_at_hours


def over_size_cap(policy: PolicyConfig, log_bytes: int) -> bool:
    """True when a log whose segment files take ``log_bytes`` is above the policy's ``retention_bytes``."""
    return policy.retention_bytes is not None and log_bytes > policy.retention_bytes


def disk_forces(disk: DiskConfig, used_ratio: float) -> bool:
    """True when disk pressure may delete unexpired and unconsumed segments at ``used_ratio``."""
    return disk.force and used_ratio > disk.force_ratio


def force_continues(disk: DiskConfig, used_ratio: float) -> bool:
    """True when a disk force already under way goes on at ``used_ratio``: above the low-water mark."""
    return disk.force and used_ratio > disk.force_target_ratio


def disk_triggers(disk: DiskConfig, used_ratio: float, forcing: bool = False) -> tuple[str, ...]:
    """The disk triggers active at ``used_ratio``; each threshold is crossed strictly above it.

    forcing: a disk force is under way (``policies.pressure``); ``disk-force`` then stays active
    down to ``force_target``, so back-to-back passes do not stop between it and ``force_ratio``."""
    triggers = []
    if used_ratio > disk.clean_ratio:
        triggers.append(DISK_CLEAN)
    if disk_forces(disk, used_ratio) or (forcing and force_continues(disk, used_ratio)):
        triggers.append(DISK_FORCE)
    if used_ratio > disk.refuse_writes_ratio:
        triggers.append(REFUSE_WRITES)
    return tuple(triggers)


def active_triggers(
    policy: PolicyConfig, used_ratio: float, now: datetime, manual: ManualTrigger = NO_MANUAL_TRIGGER,
    forcing: bool = False,
) -> tuple[str, ...]:
    """Every trigger active for a log under ``policy`` at ``now``, in the order of :data:`TRIGGERS`
    (``forcing``: see :func:`disk_triggers`)."""
    triggers = [TIME_WINDOW] if in_delete_window(policy, now) else []
    triggers.extend(disk_triggers(policy.disk, used_ratio, forcing))
    if manual.active:
        triggers.append(MANUAL)
    return tuple(triggers)
