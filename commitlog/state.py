"""Consumer progress and the log's start offset, in SQLite beside the log (`state.db`, WAL mode).

SQLite gives the crash-safe, multi-process B-tree with a journal that KahaDB wrote by hand. One
`LogState` is safe to share between threads of a process (a lock serialises its connection); any
number of processes may open the same database.
"""

from __future__ import annotations

import sqlite3
import threading
import time

from .errors import CorruptLogError, StoreFullError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS log_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS consumer_groups (
    name TEXT PRIMARY KEY,
    committed_offset INTEGER NOT NULL,
    committed_at REAL NOT NULL
);
"""


class LogState:
    """Thread-safe handle on a log's `state.db`; process-safe through SQLite's own locking."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(path, timeout=30.0, isolation_level=None,
                                       check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
                raise _translate(path, exc) from exc
            raise CorruptLogError(path, None, f"consumer state database is unreadable ({exc})") from exc

    def _query(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._lock:
            try:
                return self._db.execute(sql, args).fetchall()
            except sqlite3.DatabaseError as exc:
                raise _translate(self.path, exc) from exc

    def start_offset(self) -> int:
        rows = self._query("SELECT value FROM log_meta WHERE key = 'start_offset'")
        return rows[0][0] if rows else 0

    def advance_start_offset(self, offset: int) -> None:
        """Move the start offset forward (never back): the first step of removing a head segment."""
        self._query(
            "INSERT INTO log_meta(key, value) VALUES ('start_offset', ?) "
            "ON CONFLICT(key) DO UPDATE SET value = max(value, excluded.value)", (offset,))

    def commit(self, group: str, offset: int, at: float | None = None) -> None:
        self._query(
            "INSERT INTO consumer_groups(name, committed_offset, committed_at) VALUES (?, ?, ?) "
            "ON CONFLICT(name) DO UPDATE SET committed_offset = excluded.committed_offset, "
            "committed_at = excluded.committed_at",
            (group, offset, time.time() if at is None else at))

    def committed(self) -> dict[str, int]:
        return {name: off for name, off in
                self._query("SELECT name, committed_offset FROM consumer_groups ORDER BY name")}

    def commit_times(self) -> dict[str, float]:
        return {name: at for name, at in
                self._query("SELECT name, committed_at FROM consumer_groups ORDER BY name")}

    def delete_group(self, group: str) -> None:
        self._query("DELETE FROM consumer_groups WHERE name = ?", (group,))

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _translate(path: str, exc: sqlite3.DatabaseError) -> Exception:
    # A full disk is not a damaged database: callers treat the two very differently.
    if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
        return StoreFullError(f"no space left to update the consumer state {path}: {exc}")
    return CorruptLogError(path, None, f"consumer state database failed: {exc}")
