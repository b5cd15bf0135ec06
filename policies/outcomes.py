"""Actions: what the plan decides for a segment, and what an executor reports it did (a contract).

``retention plan`` shows ``delete`` or ``keep``; ``retention clean`` replaces ``delete`` with what
happened: ``deleted``, ``hung`` (a reader held it: kept with reason ``held``) or ``failed``; a
planned deletion the pass never reached is shown ``keep`` with reason ``not-attempted``. The
constants are immutable strings, so the module is thread-safe.
"""

from __future__ import annotations

__all__ = ["ACTIONS", "DELETE", "DELETED", "FAILED", "HUNG", "KEEP"]

DELETE = "delete"
KEEP = "keep"
DELETED = "deleted"
HUNG = "hung"
FAILED = "failed"
ACTIONS = (DELETE, DELETED, KEEP, HUNG, FAILED)
"""Every ``action`` a file can show in ``retention plan|clean --json``."""
