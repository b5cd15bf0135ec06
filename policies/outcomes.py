"""Actions: what the plan decides for a segment, and what an executor reports it did (a contract).

``retention plan`` shows ``delete`` or ``keep``; ``retention clean`` replaces ``delete`` with what
happened: ``deleted``, ``hung`` (a reader held it: kept with reason ``held``) or ``failed``; a
planned deletion the pass never reached is shown ``keep`` with reason ``not-attempted``. Each
action is declared once, a member of :class:`Action` (the module-level names are those members);
immutable, so the module is thread-safe.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ACTIONS", "DELETE", "DELETED", "FAILED", "HUNG", "KEEP", "Action"]



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
