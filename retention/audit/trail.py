"""`AuditTrail`: appending intents and outcomes to the JSON-lines file, and finding the intents
whose process died before writing their outcome (the format is described in `retention.audit`).

Thread-safe (a lock serialises appends and reads) and process-safe for appends (one `write()` per
line with O_APPEND under an exclusive flock).
"""

from __future__ import annotations

import fcntl
import json
import os
import threading

import psutil
from loguru import logger

from .entries import DAMAGED, DELETED, INTENT, OUTCOMES, Event, IntentAction, line_fields
from .records import DamagedEntry

__all__ = ["AuditTrail", "owner_alive"]

_BACKLOG_MAX = 10_000      # lines kept in memory while the audit file cannot be written


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

    def intent(self, action: IntentAction, entry: object) -> str:
        """Write (and fsync) the intent to do `action` described by `entry` (a record of
        `retention.audit.records`); return its id. Raises OSError when it cannot be written (nothing
        is kept to retry)."""
        ident = os.urandom(8).hex()
        self.append({"event": INTENT, "id": ident, "action": action, **line_fields(entry), **self._me}, sync=True)
        return ident

    def outcome(self, ident: str, event: Event, entry: object, *, recovered: bool = False) -> None:
        """Append the outcome `event` of intent `ident`, described by `entry` (a record), not fsynced:
        its intent is. Raises OSError when it cannot be written; the line is then kept and appended
        before the next one."""
        self.append(_outcome_line(ident, event, entry, recovered), keep=True)

    def outcome_or_log(self, ident: str, event: Event, entry: object, *, recovered: bool = False) -> None:
        """`outcome`, logging instead of raising when the line cannot be written now (it is kept
        and appended before the next line): an action already done is never undone for it."""
        try:
            self.outcome(ident, event, entry, recovered=recovered)
        except OSError as exc:
            logger.error("audit {} cannot be written ({}); kept in memory to append later: {}",
                         self.path, exc, {"event": event, "id": ident, **line_fields(entry)})

    def note_or_log(self, entry: object) -> None:
        """Append (and fsync) a line without an intent (a clock record: `entry.EVENT` is its event);
        one that cannot be written now is logged, kept and appended before the next line."""
        line = {"event": entry.EVENT, **line_fields(entry)}
        try:
            self.append(line, sync=True, keep=True)
        except OSError as exc:
            logger.error("audit {} cannot be written ({}); kept in memory to append later: {}",
                         self.path, exc, line)

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
            record = DamagedEntry(time=at, log=log, path=path, found=e.get("time"),
                                  facts={k: v for k, v in e.items() if k not in ("id", "time")})
            self.append({"event": DAMAGED, "id": str(e.get("id")), **line_fields(record)}, sync=True)
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


def _outcome_line(ident: str, event: Event, entry: object, recovered: bool) -> dict:
    line = {"event": event, "id": ident, **line_fields(entry)}
    if recovered:
        line["recovered"] = True
    return line


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
