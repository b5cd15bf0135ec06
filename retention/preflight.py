"""What `retention check` finds on disk beyond the configuration, as the user it runs as (run it
as the sidecar's user to check the sidecar's view): each finding one line naming the path.

Errors: a log directory this user may not read (a sidecar would plan nothing there); an audit
trail it cannot append to or create (no deletion happens unaudited, so none would happen).
Warnings: a log directory it may read but not write (planned, nothing deleted), and a log path
whose parent directory does not exist (a writer's first open creates the log, but a parent
missing is more often a typo or a volume not mounted). Reads only; stateless.
"""

from __future__ import annotations

import os

from commitlog.access import cannot_append, unreadable, unwritable
from policies import RetentionConfig

__all__ = ["ERROR", "WARNING", "findings"]

ERROR, WARNING = "error", "warning"


def findings(config: RetentionConfig) -> list[tuple[str, str]]:
    """(ERROR or WARNING, one line) for each problem found, the audit trail's first, then per log."""
    found = []
    audit = str(config.service.audit)
    why = cannot_append(audit)
    if why is not None:
        found.append((ERROR, f"service.audit: the audit trail {audit} cannot be written: {why}: "
                             "no deletion would happen"))
    for name, log in config.logs.items():
        path = str(log.path)
        denied = unreadable(path)
        if denied is not None:
            found.append((ERROR, f"logs.{name}: {path} cannot be read: {denied}"))
            continue
        if os.path.isdir(path):
            why = unwritable(path)
            if why is not None:
                found.append((WARNING, f"logs.{name}: {path} cannot be written: {why}: it would be "
                                       "planned and read, nothing deleted"))
            continue
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            found.append((WARNING, f"logs.{name}: {path}: its parent directory {parent} does not exist "
                                   "(a volume not mounted, or a typo?)"))
    return found
