"""The audit trail: a JSON-lines file that says what left every log, and survives SIGKILL.

Every removal is written as an *intent* before it is attempted and as an *outcome* after, both keyed
by one `id`, so a crash between the two leaves an intent the next pass (or restart) settles: it
writes the missing outcome with `"recovered": true` once the process that wrote the intent is gone.
Lines (each one `write()` of one line with O_APPEND under an exclusive flock, so lines of concurrent
writers never interleave and a torn line left by a killed writer is told from one being written):

- `{"event": "intent", "id", "action": "delete", "time", "log", "path", "segment", "base_offset",
  "end_offset", "bytes", "triggers", "forced", "overridden_by", "unconsumed", "pinned_by", "archived",
  "pid", "pid_start"}`: fsynced before the removal starts (`pid`, `pid_start` name the process, so a
  reader can tell a live intent from one its process died with). `action` leaves room for other
  kinds of work (a compaction output) audited the same way.
- `{"event": "deleted", "id", ...}`: the deletion, with every key a deletion line always had
  (`time, log, path, segment, base_offset, end_offset, bytes, triggers, forced, overridden_by,
  unconsumed, pinned_by, archived`); `unconsumed` names, per consumer group, the offsets it had not
  consumed; `archived` is true for an eviction, a segment the log's archive tier holds (no data lost).
  `"recovered": true` when written for a dead process's intent whose segment had left the log: a
  duplicate is possible (the original line was lost with the machine) and is marked this way.
- `{"event": "aborted", "id", "time", "log", "path", "segment", "base_offset", "end_offset",
  "reason", "recovered"}`: the intent removed nothing; `reason` is `held`, `head-changed` (another
  process removed the head first), `error`, `not-removed` (the process died before its removal),
  `removed-by-another` (another process removed and audited the segment) or `log-missing` (the
  log directory is gone).
- `{"event": "compacted", "id", ...}`: a compaction output's outcome (`action: "compact"` intents;
  the fields are `retention.compaction.compactor`'s). A compaction intent that did nothing ends `aborted`.
- `{"event": "archived", "id", ...}`: an upload's outcome (`action: "archive"` intents, written
  before a sealed segment is uploaded; the fields are `retention.archiving.uploader`'s). An upload
  that failed ends `aborted` with reason `error`; one its process died in, `not-archived` when the
  manifest does not list the segment (the next upload sends it again).
- `{"event": "damaged", "id", "time", "log", "path", "found", "kind", "segment", "position",
  "bytes", "offsets", "saved", "detail"}`: an entry of a log's damage record (commitlog.damage: what a
  writer's open found damaged and kept), written once per entry id by the pass that first sees it
  (`audit_damage`; the trail is read first, so a restarted sidecar does not repeat it).
- `{"event": "clock-stepped", "time", "trusted_time", "step_seconds", "detected", "threshold_seconds"}`:
  the wall clock (`time`) is `step_seconds` ahead of the trusted time, found `at-start` or
  `between-looks` (`retention.deletion.clockguard`); what only the step makes due waits. It lifts
  with `{"event": "clock-accepted" | "clock-returned", "time", "trusted_time", "step_seconds"}`: the
  operator accepted the new time, or the clock came back. A hold no later line lifted resumes at start.
- `{"event": "clock-set-back", "time", "expected_time", "step_seconds"}`: the wall clock (`time`) is
  `step_seconds` behind where it should be (`expected_time`); nothing is held (what is written
  meanwhile carries the back clock's times, and its correction is held as a forward step).
- A line without `event` is a deletion written before intents existed.

Each kind of line is one record of `retention.audit.records`, built by its writer and turned into a
line only here (`entries.line_fields`, `AuditTrail`); events, abort reasons and intent actions are the
enums of `retention.audit.entries`, each with its one-line doc (the docs' tables are generated from them).

Durability: the intent is fsynced (one fsync per deletion, as before); the outcome is not, because a
lost outcome is recovered from its intent. A torn last line (a crash or a full disk mid-write) is
skipped by readers, and the next append starts on a fresh line. The directory is created when
missing. A full disk does not stop deletion (see `Cleaner`): lines that cannot be written are logged
in full at ERROR and kept in memory to be appended first once space is back.

`AuditTrail` is thread-safe (a lock serialises appends and reads) and process-safe for appends.
"""

from . import entries as _entries, records as _records
from .entries import *  # noqa: F401,F403
from .readers import read_audit, read_events, read_tail
from .records import *  # noqa: F401,F403
from .trail import AuditTrail, owner_alive

__all__ = [*_entries.__all__, *_records.__all__, "AuditTrail", "owner_alive", "read_audit", "read_events",
           "read_tail"]
