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

Durability: the intent is fsynced (one fsync per deletion, as before); the outcome is not, because a
lost outcome is recovered from its intent. A torn last line (a crash or a full disk mid-write) is
skipped by readers, and the next append starts on a fresh line. The directory is created when
missing. A full disk does not stop deletion (see `Cleaner`): lines that cannot be written are logged
in full at ERROR and kept in memory to be appended first once space is back.

`AuditTrail` is thread-safe (a lock serialises appends and reads) and process-safe for appends.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from datetime import datetime, timezone

import psutil
from loguru import logger

from policies import DELETED

INTENT, ABORTED = "intent", "aborted"
COMPACTED = "compacted"    # the outcome of a compaction output's intent (retention.compaction.compactor)
ARCHIVED = "archived"      # the outcome of an upload's intent (retention.archiving.uploader)
DAMAGED = "damaged"        # an entry of a log's damage record, seen by a pass (commitlog.damage)
CLOCK_STEPPED, CLOCK_ACCEPTED, CLOCK_RETURNED = "clock-stepped", "clock-accepted", "clock-returned"
CLOCK_EVENTS = (CLOCK_STEPPED, CLOCK_ACCEPTED, CLOCK_RETURNED)   # retention.deletion.clockguard's holds
CLOCK_SET_BACK = "clock-set-back"                                 # ... and a backward step (no hold)
EVENTS = (INTENT, DELETED, ABORTED, COMPACTED, ARCHIVED, DAMAGED, *CLOCK_EVENTS, CLOCK_SET_BACK)
OUTCOMES = (DELETED, ABORTED, COMPACTED, ARCHIVED)
# Why an intent removed (or archived) nothing.
ABORT_REASONS = ("held", "head-changed", "error", "not-removed", "removed-by-another", "log-missing",
                 "not-archived")
_BACKLOG_MAX = 10_000      # lines kept in memory while the audit file cannot be written
_TAIL_BYTES = 4 << 20      # what `read_tail` reads of a long trail


def audit_time(at: float) -> str:
    """The `time` of an audit line: ISO 8601 UTC with milliseconds."""
    return datetime.fromtimestamp(at, timezone.utc).isoformat(timespec="milliseconds")


def _process_start(pid: int) -> float | None:
    try:
        return round(psutil.Process(pid).create_time(), 2)
    except (psutil.Error, OSError):
        return None


def owner_alive(entry: dict) -> bool:
    """True while the process that wrote `entry` (an intent) still runs; a reused pid is not it."""
    pid, start = entry.get("pid"), entry.get("pid_start")
    if not isinstance(pid, int):
        return False
    return start is not None and _process_start(pid) == start


class AuditTrail:
    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        self._lock = threading.Lock()
        self._me = {"pid": os.getpid(), "pid_start": _process_start(os.getpid())}
        self._backlog: list[bytes] = []
        self._read_at = (0, 0)                 # (inode, byte position) read so far by `unresolved`
        self._pending: dict[str, bytes | dict] = {}   # intents without an outcome yet (raw or parsed)
        self.torn_lines = 0                    # unparseable lines skipped by `unresolved`
        self._damage_seen: set[str] = set()    # ids of damage entries the trail holds

    # ------------------------------------------------------------------ writing
    def record(self, entry: dict) -> None:
        """Append `entry` as one line and fsync it; raises OSError if it cannot be written."""
        self.append(entry, sync=True)

    def intent(self, action: str, entry: dict) -> str:
        """Write (and fsync) the intent to do `action` described by `entry`; return its id.
        Raises OSError when it cannot be written (nothing is kept to retry)."""
        ident = os.urandom(8).hex()
        self.append({"event": INTENT, "id": ident, "action": action, **entry, **self._me}, sync=True)
        return ident

    def outcome(self, ident: str, event: str, entry: dict, *, recovered: bool = False) -> None:
        """Append the outcome of intent `ident` (not fsynced: its intent is). Raises OSError when it
        cannot be written; the line is then kept and appended before the next one."""
        line = {"event": event, "id": ident, **entry}
        if recovered:
            line["recovered"] = True
        self.append(line, keep=True)

    def outcome_or_log(self, ident: str, event: str, entry: dict, *, recovered: bool = False) -> None:
        """`outcome`, logging instead of raising when the line cannot be written now (it is kept
        and appended before the next line): an action already done is never undone for it."""
        try:
            self.outcome(ident, event, entry, recovered=recovered)
        except OSError as exc:
            logger.error("audit {} cannot be written ({}); kept in memory to append later: {}",
                         self.path, exc, {"event": event, "id": ident, **entry})

    def append(self, entry: dict, *, sync: bool = False, keep: bool = False) -> None:
        """Append one line; with `keep`, a line that cannot be written is kept and retried first
        at the next append (then OSError is still raised)."""
        line = (json.dumps(entry, separators=(",", ":")) + "\n").encode()
        with self._lock:
            try:
                self._drain()
                self._write(line, sync=sync)
            except OSError:
                if keep and len(self._backlog) < _BACKLOG_MAX:
                    self._backlog.append(line)
                raise

    def flush_backlog(self) -> None:
        """Append the lines kept while the file could not be written; raises OSError if it still
        cannot be (they stay kept)."""
        with self._lock:
            self._drain()

    def _drain(self) -> None:
        while self._backlog:
            self._write(self._backlog[0], sync=False)
            self._backlog.pop(0)

    @property
    def backlog(self) -> int:
        """Lines waiting in memory for the audit file to be writable again."""
        return len(self._backlog)

    def _write(self, line: bytes, *, sync: bool) -> None:
        directory = os.path.dirname(self.path)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
            created = False
        except FileNotFoundError:
            os.makedirs(directory, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            created = True
        try:
            # Writers take turns: another process's write in progress grows the file page by page,
            # and its unfinished tail must not be taken for a torn line.
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = b"\n" + line  # a torn line ends here: start a fresh one, in the same write
            written = os.write(fd, line)
            if written != len(line):
                raise OSError(28, f"short write to {self.path} ({written} of {len(line)} bytes)")
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.fsync(dfd)  # the new file's name survives a power loss too
            finally:
                os.close(dfd)

    def audit_damage(self, log: str, path: str, entries: list[dict], at: float) -> int:
        """Append a `damaged` line for each of `entries` (a log's damage record) the trail does
        not hold yet; returns how many. Raises OSError when one cannot be written (the rest wait
        for the next pass)."""
        with self._lock:
            self._read_new()
            new = [e for e in entries if str(e.get("id")) not in self._damage_seen]
        for e in new:
            self.append({"event": DAMAGED, "id": str(e.get("id")), "time": audit_time(at),
                         "log": log, "path": path, "found": e.get("time"),
                         **{k: v for k, v in e.items() if k not in ("id", "time")}}, sync=True)
            with self._lock:
                self._damage_seen.add(str(e.get("id")))
        return len(new)

    # ------------------------------------------------------------------ reconciling
    def unresolved(self) -> list[dict]:
        """Intents without an outcome whose process is gone, oldest first. Reads only what was
        appended since the last call (the whole file the first time). An intent another intent's
        `deleted` line covers (same path and base offset) carries `covered_by`."""
        with self._lock:
            self._read_new()
            entries = [self._parsed(i, v) for i, v in list(self._pending.items())]
            return [dict(e) for e in entries if e is not None and not owner_alive(e)]

    def _read_new(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            self._read_at, self._pending = (0, 0), {}
            return
        try:
            st = os.fstat(fd)
            inode, pos = self._read_at
            if st.st_ino != inode or st.st_size < pos:
                pos, self._pending = 0, {}  # a new or rotated file: read it from the start
            if st.st_size == pos:
                self._read_at = (st.st_ino, pos)
                return
            data = os.pread(fd, st.st_size - pos, pos)
        finally:
            os.close(fd)
        end = data.rfind(b"\n") + 1  # an unfinished last line is read again next time
        for raw in data[:end].splitlines():
            self._take(raw)
        self._read_at = (st.st_ino, pos + end)

    def _take(self, raw: bytes) -> None:
        # Most lines are an intent and then its outcome: matched by id without parsing JSON, so a
        # first pass over a trail of 100,000 lines stays cheap; the rest is parsed when needed.
        event, ident = _peek(raw)
        if event == DAMAGED:
            self._damage_seen.add(ident)
            return
        if event == INTENT:
            self._pending[ident] = raw
            return
        if event in OUTCOMES:
            self._pending.pop(ident, None)
            if event != DELETED or not self._pending:
                return
        if not raw.strip():
            return
        try:
            entry = json.loads(raw)
        except ValueError:
            self.torn_lines += 1
            return
        if not isinstance(entry, dict):
            self.torn_lines += 1
            return
        event, ident = entry.get("event"), entry.get("id")
        if event == INTENT and isinstance(ident, str):
            self._pending[ident] = entry
        elif event in OUTCOMES and isinstance(ident, str):
            self._pending.pop(ident, None)
            if event == DELETED:
                key = (entry.get("path"), entry.get("base_offset"))
                for other_id, other in list(self._pending.items()):
                    other = self._parsed(other_id, other)
                    if other is not None and (other.get("path"), other.get("base_offset")) == key:
                        other["covered_by"] = ident

    def _parsed(self, ident: str, value: bytes | dict) -> dict | None:
        if isinstance(value, dict):
            return value
        try:
            entry = json.loads(value)
        except ValueError:
            entry = None
        if not isinstance(entry, dict):
            self.torn_lines += 1
            del self._pending[ident]
            return None
        self._pending[ident] = entry
        return entry


_LINE_START = b'{"event":"'


def _peek(raw: bytes) -> tuple[str | None, str | None]:
    """(event, id) of a line this module wrote (`{"event":"E","id":"I",...}`), else (None, None)."""
    if not raw.startswith(_LINE_START) or not raw.endswith(b"}"):
        return None, None
    end = raw.find(b'"', len(_LINE_START))
    rest = raw[end:end + 7]
    if rest != b'","id":':
        return None, None
    start = end + 8
    stop = raw.find(b'"', start)
    if stop < 0:
        return None, None
    return raw[len(_LINE_START):end].decode(errors="replace"), raw[start:stop].decode(errors="replace")


def deletion_entry(*, at: float, log: str, path: str, segment: str, base_offset: int,
                   end_offset: int, bytes: int, triggers: list[str], forced: bool,
                   overridden_by: str | None, unconsumed: list[tuple[str, int, int]],
                   pinned_by: list[dict] | None = None, archived: bool = False, paced: bool = False,
                   unpaced: str | None = None) -> dict:
    """The audit line of one deletion; `unconsumed` holds (group, first, end-exclusive) ranges;
    `archived`: the log's archive tier holds the segment (an eviction, nothing lost); `paced`: its
    bytes were freed at the policy's disk.delete_rate, `unpaced`: why that rate was not applied."""
    entry = {
        "time": audit_time(at),
        "log": log,
        "path": path,
        "segment": segment,
        "base_offset": base_offset,
        "end_offset": end_offset,
        "bytes": bytes,
        "triggers": triggers,
        "forced": forced,
        "overridden_by": overridden_by,
        "unconsumed": [{"group": g, "first_offset": first, "end_offset": end}
                       for g, first, end in unconsumed],
        "pinned_by": pinned_by or [],
        "archived": archived,
        "paced": paced,
    }
    if unpaced:
        entry["unpaced"] = unpaced
    return entry


def aborted_entry(intent: dict, *, at: float, reason: str) -> dict:
    """The outcome line of an intent that removed nothing (`reason` from ABORT_REASONS)."""
    return {"time": audit_time(at), **{k: intent[k] for k in ("log", "path", "segment", "base_offset",
                                                         "end_offset")}, "reason": reason}


def recovered_deletion(intent: dict, *, at: float) -> dict:
    """The deletion line written for a dead process's intent whose segment left the log."""
    entry = {k: intent[k] for k in ("log", "path", "segment", "base_offset", "end_offset", "bytes",
                                    "triggers", "forced", "overridden_by", "unconsumed", "pinned_by", "archived",
                                    "unpaced")   # not "paced": a crash's leftover went at once
             if k in intent}
    return {"time": audit_time(at), **entry, "intent_time": intent.get("time")}


class SettledIntents:
    """Tallies the intents settled for dead processes, to say once per log what was settled
    (one line, however many intents a crash left). Not thread-safe: one settling pass owns it."""

    def __init__(self, what: str) -> None:
        self.what = what                       # "removal" or "compaction"
        self._counts: dict[str, dict[str, int]] = {}
        self._pids: dict[str, set] = {}

    def add(self, log: str, outcome: str, pid: object) -> None:
        per_log = self._counts.setdefault(log, {})
        per_log[outcome] = per_log.get(outcome, 0) + 1
        self._pids.setdefault(log, set()).add(pid if isinstance(pid, int) else "?")

    @property
    def total(self) -> int:
        return sum(sum(c.values()) for c in self._counts.values())

    def lines(self) -> list[str]:
        """One line per log, e.g. `staging: settled 3 audit intents of interrupted removals
        (pid 4242, died before writing their outcome): 1 deleted, 2 not-removed`."""
        out = []
        for log, counts in sorted(self._counts.items()):
            total = sum(counts.values())
            pids = ", ".join(str(p) for p in sorted(self._pids[log], key=str))
            outcomes = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
            out.append(f"{log}: settled {total} audit intent{'s' if total != 1 else ''} of interrupted "
                       f"{self.what}s (pid {pids}, died before writing the outcome): {outcomes}")
        return out


def read_events(path: str) -> list[dict]:
    """Every well-formed line of an audit file, intents and outcomes, skipping torn lines."""
    out = []
    try:
        with open(path, "rb") as f:
            for raw in f:
                try:
                    entry = json.loads(raw)
                except ValueError:
                    continue  # a torn line (crash or full disk mid-write) or a fragment
                if isinstance(entry, dict):
                    out.append(entry)
    except FileNotFoundError:
        return []
    return out


def read_tail(path: str, size: int = _TAIL_BYTES) -> list[dict]:
    """The well-formed lines among the last `size` bytes of an audit file (a cut first line and torn
    lines skipped); [] when it cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            start = max(0, f.tell() - size)
            f.seek(start)
            data = f.read(size)
    except OSError:
        return []
    if start:
        data = data[data.find(b"\n") + 1:]
    out = []
    for raw in data.splitlines():
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        if isinstance(entry, dict):
            out.append(entry)
    return out


def read_audit(path: str) -> list[dict]:
    """Every deletion in an audit file (for tests and `retention status`): `deleted` lines, and lines
    from before intents existed; torn lines are skipped."""
    return [e for e in read_events(path) if e.get("event", DELETED) == DELETED]
