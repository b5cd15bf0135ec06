"""Consumer progress in SQLite beside the log (`state.db`, WAL mode), and the log's start offset
(commitlog.startoffset's `start.offset`; `state.db` held it before, and is still read for it).

Works where SQLite alone would not (docs, Concepts, "Consumer state in SQLite"): on a full disk,
reads use a short-lived `locking_mode=EXCLUSIVE` connection (heap wal-index) and commits raise
StoreFullError changing nothing; an idle log holds no connection and groups are reread only when
`state.db` or its `-wal` changed (mtime, not reused when racily recent); where this process cannot
write, it reads `mode=ro` or `immutable=1`, raises LogNotReadableError rather than give a stale
answer, LogNotWritableError for writes, and reconnects once the cause is gone.

One `LogState` is safe to share between threads of a process (a lock serialises its
connection); any number of processes may open the same database.
"""

from __future__ import annotations

import logging
import math
import os
import sqlite3
import threading
import time

from .access import process_user, unwritable
from .errors import CorruptLogError, LogNotReadableError, LogNotWritableError, StoreFullError
from .layout import start_offset_path
from .safeopen import connect_sqlite
from .startoffset import StartOffsetFile

log = logging.getLogger("commitlog")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS log_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS consumer_groups (
    name TEXT PRIMARY KEY,
    committed_offset INTEGER NOT NULL,
    committed_at REAL NOT NULL
);
"""
_NO_ROOM = (sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR)  # primary codes worth a read without room
_FULL = (sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR_SHMSIZE)  # a write's "no space left"
_START_SQL = "SELECT value FROM log_meta WHERE key = 'start_offset'"
_GROUPS_SQL = "SELECT name, committed_offset, committed_at FROM consumer_groups ORDER BY name"
_RACY_NS = 1_000_000_000  # far above a coarse file timestamp's granularity (a jiffy, <= 10 ms)


class LogState:
    """Thread-safe handle on a log's `state.db` and `start.offset`; process-safe through
    SQLite's locking and the start offset file's flock."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._start_lock = threading.Lock()  # opening or creating start.offset
        self._db: sqlite3.Connection | None = None
        self._start_path = start_offset_path(os.path.dirname(path))
        self._start_file: StartOffsetFile | None = None
        self._legacy_start: int | None = None  # state.db's row, read once the file exists
        self._groups: tuple[tuple, list[tuple]] | None = None  # (files' signature, rows) last read
        self._readonly = _cannot_write(path)   # why this process cannot write it, None when it can
        try:
            if not (self._readonly and not os.path.exists(path)):
                self._connect()
        except sqlite3.DatabaseError as exc:
            if _primary(exc) not in _NO_ROOM:
                error = _translate(path, exc)
                if isinstance(error, CorruptLogError):
                    error = CorruptLogError(path, None, f"consumer state database is unreadable ({exc})")
                raise error from exc
            if os.path.getsize(path) == 0:  # a new log on a full disk: nothing to read
                raise _translate(path, exc) from exc
            self._query("SELECT count(*) FROM consumer_groups")  # readable without room?
        try:
            self._start_file = StartOffsetFile.open(self._start_path)
            if self._db is not None and self._start_file is not None:
                # A log's open asks for its start offset next: state.db's row is read on this
                # connection (kept, as that read's would be) instead of a second one.
                self._legacy_start = self._db_start()
            else:
                self._drop()  # reconnected at the first read or commit (see the module docstring)
        except BaseException:
            self._drop()
            raise

    # ------------------------------------------------------------------ SQLite
    def _connect(self) -> sqlite3.Connection:
        if self._db is None and self._readonly:
            self._db = _connect_readonly(self.path, self._readonly)
        if self._db is None:
            db = connect_sqlite(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=FULL")
                db.executescript(_SCHEMA)
            except BaseException:
                db.close()  # its shared lock would block the exclusive reader below
                raise
            self._db = db
        return self._db

    def _refresh_readonly(self) -> None:
        """A mount remounted read-write, or permissions fixed: reconnect normally, so commits work again."""
        if self._readonly and _cannot_write(self.path) is None:
            with self._lock:
                if self._db is not None:
                    self._db.close()
                self._db = None
                self._groups = None
                self._readonly = None

    def _query(self, sql: str, args: tuple = (), *, write: bool = False) -> list[tuple]:
        self._refresh_readonly()
        if write and self._readonly:
            raise LogNotWritableError(os.path.dirname(self.path), self._readonly)
        if self._readonly and not os.path.exists(self.path):
            return []                        # no consumer ever committed, and none can now
        with self._lock:
            if write:
                self._groups = None
            try:
                return self._connect().execute(sql, args).fetchall()
            except sqlite3.DatabaseError as exc:
                if write or _primary(exc) not in _NO_ROOM:
                    raise _translate(self.path, exc) from exc
                self._drop()
                try:
                    return self._read_without_room(sql, args)
                except sqlite3.DatabaseError as exc2:
                    raise _translate(self.path, exc2) from exc2

    def _group_rows(self) -> list[tuple]:
        """(name, committed offset, committed at) of every group, reread only when the files
        changed (see the module docstring)."""
        now = time.time_ns()
        signature = (_stat_key(self.path), _stat_key(self.path + "-wal", empty=None))
        cached = self._groups
        if cached is not None and cached[0] == signature:
            if self._db is not None:
                with self._lock:
                    self._drop()  # nothing changed since the last read: an idle log holds none
            return cached[1]
        rows = self._query(_GROUPS_SQL)
        for name, offset, at in rows:
            _check_value(self.path, f"group {name!r}'s committed offset", offset)
            if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at):
                raise CorruptLogError(self.path, None, f"group {name!r}'s commit time is {at!r}, not a time")
        if max((s[2] for s in signature if s is not None), default=now) < now - _RACY_NS:
            self._groups = (signature, rows)
        return rows

    def _read_without_room(self, sql: str, args: tuple) -> list[tuple]:
        # Heap-memory wal-index (see the module docstring): no -shm to grow on a full disk.
        db = connect_sqlite(self.path, timeout=30.0, isolation_level=None)
        try:
            db.execute("PRAGMA locking_mode=EXCLUSIVE")
            return db.execute(sql, args).fetchall()
        finally:
            db.close()

    def _drop(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    # ------------------------------------------------------------------ the start offset
    def start_offset(self) -> int:
        f = self._start_file
        if f is None:
            with self._start_lock:
                f = self._start_file = self._start_file or StartOffsetFile.open(self._start_path)
            if f is None:
                return self._db_start()  # a log from before start.offset
        legacy = self._legacy_start
        if legacy is None:
            legacy = self._legacy_start = self._db_start()
        return max(f.value(), legacy)

    def _db_start(self) -> int:
        rows = self._query(_START_SQL)
        return _check_value(self.path, "the start offset", rows[0][0]) if rows else 0

    def has_start_file(self) -> bool:
        """Whether `start.offset` exists (a log from before it has only `state.db`'s row)."""
        if self._start_file is None:
            with self._start_lock:
                self._start_file = self._start_file or StartOffsetFile.open(self._start_path)
        return self._start_file is not None

    def ensure_start_file(self, floor: int = 0) -> bool:
        """Create `start.offset` if missing, from `state.db`'s start offset or `floor` when higher
        (call with the removal lock held). False when the disk has no room for it yet."""
        with self._start_lock:
            if self._start_file is None:
                self._start_file = StartOffsetFile.open(self._start_path)
            if self._start_file is None:
                self._start_file = StartOffsetFile.create(self._start_path, max(self._db_start(), floor))
                if self._start_file is None:
                    log.warning("no room to create %s yet; the start offset stays in %s",
                                self._start_path, self.path)
            return self._start_file is not None

    def advance_start_offset(self, offset: int) -> None:
        """Move the start offset forward (never back): the first step of removing a head
        segment. In place in `start.offset`, so it needs no free block; StoreFullError only for
        a log from before that file, on a disk with no room to create it."""
        if self._start_file is None and not self.ensure_start_file(offset):  # created advanced
            self._query(
                "INSERT INTO log_meta(key, value) VALUES ('start_offset', ?) "
                "ON CONFLICT(key) DO UPDATE SET value = max(value, excluded.value)", (offset,),
                write=True)
            return
        self._start_file.advance(offset)

    # ------------------------------------------------------------------ consumer groups
    def commit(self, group: str, offset: int, at: float | None = None) -> None:
        self._query(
            "INSERT INTO consumer_groups(name, committed_offset, committed_at) VALUES (?, ?, ?) "
            "ON CONFLICT(name) DO UPDATE SET committed_offset = excluded.committed_offset, "
            "committed_at = excluded.committed_at",
            (group, offset, time.time() if at is None else at), write=True)

    def committed(self) -> dict[str, int]:
        return {name: off for name, off, _ in self._group_rows()}

    def commit_times(self) -> dict[str, float]:
        return {name: at for name, _, at in self._group_rows()}

    def delete_group(self, group: str) -> None:
        self._query("DELETE FROM consumer_groups WHERE name = ?", (group,), write=True)

    def close(self) -> None:
        with self._lock:
            self._drop()
            if self._start_file is not None:
                self._start_file.close()


def _cannot_write(path: str) -> str | None:
    """Why this process cannot write the database `path` (its directory holds the -wal and -shm)."""
    return unwritable(os.path.dirname(path) or ".", files=(path,))


def _connect_readonly(path: str, why: str) -> sqlite3.Connection:
    """A read-only connection (see the module docstring); `why` it must be one, for the error."""
    db = connect_sqlite(path, "mode=ro", isolation_level=None, check_same_thread=False)
    try:
        db.execute("SELECT count(*) FROM sqlite_master").fetchall()   # opens the -shm, or fails
        return db
    except sqlite3.OperationalError:
        db.close()
    if _stat_key(path + "-wal", empty=None) is not None:
        raise LogNotReadableError(os.path.dirname(path), f"{path}-wal holds consumer commits and there is no "
                                  f"{path}-shm to read them through; only a process that may write "
                                  f"the directory can ({why})")
    # No -shm to map and no -wal: immutable reads the database file alone, and it is all there is.
    return connect_sqlite(path, "mode=ro&immutable=1", isolation_level=None, check_same_thread=False)


def _stat_key(path: str, empty: object = 0) -> tuple[int, int, int, int, int] | None:
    """(inode, size, mtime, ctime, device): ctime too, which a write moves even when the writer puts
    the mtime back (os.utime), but 0 for a -wal (`empty=None`: SQLite run as root chowns it on every
    opening); None when missing. With `empty=None`, an empty file counts
    as missing: a connection creates an empty -wal and the last one to close deletes it, and
    neither changes what the database holds (a commit's frames make it non-empty)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    if st.st_size == 0 and empty is None:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns, 0 if empty is None else st.st_ctime_ns, st.st_dev


def _check_value(path: str, what: str, value: object) -> int:
    """`value` read from the database, if it is an offset (SQLite keeps whatever a column is given)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CorruptLogError(path, None, f"{what} is {value!r:.40}, not an offset")
    return value


def _primary(exc: sqlite3.DatabaseError) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF


def _translate(path: str, exc: sqlite3.DatabaseError) -> Exception:
    # A full disk is not a damaged database: callers treat the two very differently.
    if getattr(exc, "sqlite_errorcode", None) in _FULL:
        return StoreFullError(f"no space left to update the consumer state {path}: {exc}")
    # Nor is a permission problem: a database this process may not write or open is never "corrupt".
    if _primary(exc) == sqlite3.SQLITE_READONLY:
        return LogNotWritableError(os.path.dirname(path), f"its consumer state database is read-only "
                                   f"to {process_user()} ({exc})")
    if _primary(exc) in (sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM):
        return LogNotReadableError(os.path.dirname(path), f"{process_user()} cannot open its consumer state "
                                   f"database {path} ({exc})")
    return CorruptLogError(path, None, f"consumer state database failed: {exc}")
