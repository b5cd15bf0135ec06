"""Reason codes: why a segment is kept (the codes are a user-facing contract).

A kept segment lists every code that applies to it, each one sufficient on its own to keep it in
this pass. Every code that can appear in output (``retention plan|clean --json``, ``/plan``,
``/clean``, TRACE decision lines) is in ``REASONS``: ``active``, ``reserved``, ``no-trigger``,
``unconsumed:GROUP``, ``prefix``, ``batch-limit``, ``not-archived``, ``clock-step`` and ``held`` come from the plan; ``held`` also
from a delete attempt that found a reader, and ``not-attempted`` only from an executed pass, for a
planned deletion the pass did not reach (it stopped at an earlier failure or a held segment, or was
stopped). Each code is declared once, a member of :class:`Reason` (``unconsumed:GROUP`` is a pattern:
:func:`unconsumed`); the module-level names are those members. Immutable; the functions are pure.

Actions (:class:`Action`, the same contract): ``retention plan`` shows ``delete`` or ``keep``;
``retention clean`` replaces ``delete`` with what happened: ``deleted``, ``hung`` (kept with reason
``held``) or ``failed``; a planned deletion the pass never reached shows ``keep``, ``not-attempted``.
"""

from __future__ import annotations

from enum import StrEnum
from types import MappingProxyType

__all__ = [
    "ACTIONS",
    "ACTIVE",
    "Action",
    "BATCH_LIMIT",
    "ARCHIVED",
    "Cause",
    "CLOCK_STEP",
    "DELETE",
    "DELETED",
    "EXPIRED",
    "FAILED",
    "HELD",
    "HUNG",
    "KEEP",
    "NOT_ARCHIVED",
    "NOT_ATTEMPTED",
    "NO_TRIGGER",
    "PREFIX",
    "REASONS",
    "RESERVED",
    "Reason",
    "UNCONSUMED_PREFIX",
    "describe_reason",
    "unconsumed",
    "unconsumed_group",
]



class Action(StrEnum):
    """What a plan decides for a file, or what an executor did (its value is what output shows)."""

    DELETE = "delete"
    DELETED = "deleted"
    KEEP = "keep"
    HUNG = "hung"
    FAILED = "failed"


DELETE, DELETED, KEEP, HUNG, FAILED = Action.DELETE, Action.DELETED, Action.KEEP, Action.HUNG, Action.FAILED
ACTIONS = tuple(Action)
"""Every ``action`` a file can show in ``retention plan|clean --json``."""


class Reason(StrEnum):
    """A reason to keep a segment (its value is what output shows)."""

    ACTIVE = "active"
    RESERVED = "reserved"
    NO_TRIGGER = "no-trigger"
    PREFIX = "prefix"
    BATCH_LIMIT = "batch-limit"
    NOT_ARCHIVED = "not-archived"
    CLOCK_STEP = "clock-step"
    HELD = "held"
    NOT_ATTEMPTED = "not-attempted"


class Cause(StrEnum):
    """Not a reason to keep: a code of a deletion's ``because`` besides its triggers."""

    EXPIRED = "expired"
    """The first code of a deletion's ``because``: older than reserve."""
    ARCHIVED = "archived"
    """The last code of a deletion's ``because`` when the log's archive tier holds the segment (an
    eviction: nothing is lost)."""


ACTIVE, RESERVED, NO_TRIGGER, PREFIX = Reason.ACTIVE, Reason.RESERVED, Reason.NO_TRIGGER, Reason.PREFIX
BATCH_LIMIT, NOT_ARCHIVED, CLOCK_STEP = Reason.BATCH_LIMIT, Reason.NOT_ARCHIVED, Reason.CLOCK_STEP
HELD, NOT_ATTEMPTED = Reason.HELD, Reason.NOT_ATTEMPTED
EXPIRED, ARCHIVED = Cause.EXPIRED, Cause.ARCHIVED
UNCONSUMED_PREFIX = "unconsumed:"

REASONS = MappingProxyType(
    {
        ACTIVE: "it is the segment being written",
        RESERVED: "it is younger than the policy's reserve and the disk does not force",
        NO_TRIGGER: "no trigger is active: not a delete hour, disk below clean_ratio, no manual pass",
        UNCONSUMED_PREFIX + "GROUP": "consumer group GROUP has not consumed it and the disk does not force",
        PREFIX: "an older segment is kept, and deletion never leaves a hole",
        BATCH_LIMIT: "files_per_pass deletions are already planned for this pass",
        NOT_ARCHIVED: "the log has an archive tier that does not hold it yet: local retention evicts "
        "archived segments only, unless the disk forces",
        CLOCK_STEP: "it expired only by a wall clock stepped forward past service.clock_step_threshold: it "
        "waits until the operator accepts the new time (retention clock accept) or the clock returns",
        HELD: "a reader holds it; the delete is retried every retry_every and forced after force_after",
        NOT_ATTEMPTED: "its deletion was planned but the pass stopped before it (a failure, a held "
        "segment or a stop); the next pass plans it again",
    }
)
"""Every reason code (``unconsumed:GROUP`` as a pattern) with its one-line explanation."""


def unconsumed(group: str) -> str:
    """Return the code for a segment consumer group ``group`` still needs: ``unconsumed:GROUP``."""
    return UNCONSUMED_PREFIX + group


def unconsumed_group(code: str) -> str | None:
    """Return the group named by an ``unconsumed:GROUP`` code, or None for any other code."""
    return code[len(UNCONSUMED_PREFIX) :] if code.startswith(UNCONSUMED_PREFIX) else None


def describe_reason(code: str) -> str:
    """Return the one-line plain-words explanation of ``code``; raise ``ValueError`` if unknown."""
    group = unconsumed_group(code)
    if group is not None:
        return f"consumer group {group} has not consumed it and the disk does not force"
    try:
        return REASONS[code]
    except KeyError:
        raise ValueError(f"unknown reason code {code!r}") from None
