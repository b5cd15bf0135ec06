"""The audit trail: a JSON-lines file that says what left every log, and survives SIGKILL.

Every removal is an *intent* line (fsynced before it is attempted) and an *outcome* line after,
keyed by one `id`; an intent whose process died is settled by the next pass (`"recovered": true`).
Each line is one O_APPEND `write()` under an exclusive flock: concurrent writers never interleave,
and readers skip a torn last line. Each kind of line is one record of `retention.audit.records`,
built by its writer and serialised only here (`entries.line_fields`, `AuditTrail`); events, abort
reasons and intent actions are the enums of `retention.audit.entries`. On a full disk, lines that
cannot be written are logged in full at ERROR and kept in memory to append first later.
Every key of every line, and why the trail is written this way: docs/operations.md, "Audit trail".

`AuditTrail` is thread-safe (a lock serialises appends and reads) and process-safe for appends.
"""

from . import entries as _entries, records as _records
from .entries import *  # noqa: F401,F403
from .readers import read_audit, read_events, read_tail
from .records import *  # noqa: F401,F403
from .trail import AuditTrail, owner_alive

__all__ = [*_entries.__all__, *_records.__all__, "AuditTrail", "owner_alive", "read_audit", "read_events",
           "read_tail"]
