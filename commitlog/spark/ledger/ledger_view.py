"""Reading the staging ledger, `<log>/spark.db`: which records of the log are visible, what
unresolved writers may still append, which dead writers' records the store has not marked yet,
and the jobs. Readers (batch reads, streams), marking and the retention protector take a
`LedgerView`; staging (`commitlog.spark.ledger.ledger.Ledger`) extends it with the writes.

The file (WAL, synchronous=FULL) holds what the record store does not know about jobs: jobs,
writers (task attempts), their records and the micro-batches sinks committed (the tables:
`ledger_tables`). A record is visible exactly when its row says so; everything else in the log
(records of aborted jobs, of failed task attempts, of crashed writers, of other appenders) is
invisible to readers. The records of dead writers are also marked dead in the store
(`commitlog.spark.ledger.marking`), so a compaction reclaims them. Streams never move past the first
offset of an unresolved writer (`pending_floor`), so a job that commits late is never skipped.

The upkeep a reader does is here too: declaring writers whose processes are gone dead
(`resolve_abandoned`) and remembering what marking did (`note_marked`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from commitlog import CorruptLogError
from commitlog.layout import SPARK_LEDGER_FILE
from commitlog.safeopen import connect_sqlite

from . import ledger_tables, processes
from ..staging_errors import NoSchemaError

log = logging.getLogger("commitlog.spark")

LEDGER_FILE = SPARK_LEDGER_FILE

OPEN, COMMITTED, ABORTED = "open", "committed", "aborted"
WRITING, WRITTEN, DEAD = "writing", "written", "dead"
OPEN_END = 1 << 63           # the end of a pending range that may still grow


@dataclass(frozen=True)
class VisibleRecord:
    offset: int
    rows: int
    bytes: int


@dataclass(frozen=True)
class JobInfo:
    job_id: str
    kind: str
    state: str
    records: int
    rows: int
    sink_id: str | None
    batch_id: int | None
    reason: str | None


class LedgerView:
    """A handle on `<log>/spark.db` for reading; cheap to open, safe to share between threads of
    a process, and safe between processes through SQLite's locking (every change is one
    IMMEDIATE transaction)."""

    def __init__(self, log_path: str, *, readonly: bool = False) -> None:
        """`readonly`: a connection that writes nothing but SQLite's `-shm` index, and leaves the
        `-wal` and `-shm` it finds or makes in place (a retention process's reads: its own reads
        of a watched log directory's ledger are then no change inotify reports); the ledger is
        neither made nor brought up to date, and only the read methods may be used."""
        self.log_path = log_path
        self.path = os.path.join(log_path, LEDGER_FILE)
        self._lock = threading.Lock()
        try:
            self._db = connect_sqlite(self.path, "mode=ro" if readonly else "", timeout=60.0, isolation_level=None,
                                      check_same_thread=False)
            if not readonly:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=FULL")
                ledger_tables.create(self._db)
        except sqlite3.DatabaseError as exc:
            raise CorruptLogError(self.path, None, f"staging ledger is unreadable ({exc})") from exc

    @classmethod
    def exists(cls, log_path: str) -> bool:
        return os.path.isfile(os.path.join(log_path, LEDGER_FILE))

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _query(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # ------------------------------------------------------------------ schema
    def schema_json(self) -> str | None:
        rows = self._query("SELECT value FROM staging_meta WHERE key = 'spark_schema'")
        return rows[0][0] if rows else None

    def require_schema_json(self) -> str:
        text = self.schema_json()
        if text is None:
            raise NoSchemaError(
                f"commit log {self.log_path} has no staged schema: write a DataFrame to it first "
                f"(df.write.format('commitlog')...), or pass one with .schema(...)")
        return text

    def sink_batch_committed(self, sink_id: str, batch_id: int) -> bool:
        return bool(self._query("SELECT 1 FROM sink_batches WHERE sink_id = ? AND batch_id = ?",
                                (sink_id, batch_id)))

    # ------------------------------------------------------------------ readers
    def resolve_abandoned(self) -> int:
        """Declare dead the writers nobody can commit any more: a `writing` writer whose task
        process is gone, and any unresolved writer (and open job) whose driver is gone. Returns
        how many writers were declared dead."""
        rows = self._query("SELECT writer_id, state, pid, pid_start, owner_pid, owner_start "
                           "FROM writers WHERE state IN (?, ?)", (WRITING, WRITTEN))
        doomed = []
        for writer_id, state, pid, pid_start, owner_pid, owner_start in rows:
            if not processes.is_alive(owner_pid, owner_start):
                doomed.append(writer_id)
            elif state == WRITING and not processes.is_alive(pid, pid_start):
                doomed.append(writer_id)
        jobs = [job_id for job_id, pid, start in self._query(
            "SELECT job_id, owner_pid, owner_start FROM jobs WHERE state = ?", (OPEN,))
            if not processes.is_alive(pid, start)]
        if not doomed and not jobs:
            return 0
        now = time.time()
        killed = 0
        with self._tx() as db:
            for writer_id in doomed:
                killed += db.execute("UPDATE writers SET state = ?, finished_at = ? WHERE "
                                     "writer_id = ? AND state IN (?, ?)",
                                     (DEAD, now, writer_id, WRITING, WRITTEN)).rowcount
            for job_id in jobs:
                db.execute("UPDATE jobs SET state = ?, finished_at = ?, reason = ? "
                           "WHERE job_id = ? AND state = ?",
                           (ABORTED, now, "abandoned: its driver process is gone", job_id, OPEN))
                killed += db.execute("UPDATE writers SET state = ?, finished_at = ? WHERE "
                                     "job_id = ? AND state IN (?, ?)",
                                     (DEAD, now, job_id, WRITING, WRITTEN)).rowcount
        log.warning("declared %d abandoned writer(s) and %d job(s) dead in %s", killed,
                    len(jobs), self.log_path)
        return killed

    def pending_floor(self) -> int | None:
        """The lowest offset an unresolved writer may have appended at (None: none pending)."""
        rows = self._query("SELECT min(first_offset) FROM writers WHERE state IN (?, ?)",
                           (WRITING, WRITTEN))
        return rows[0][0] if rows else None

    def pending_spans(self) -> list[tuple[int, int]]:
        """[start, end) spans holding every record an unresolved writer appended or may still
        append (unsorted, may overlap): [first offset, OPEN_END) for a writer still `writing`
        (it may append anywhere at or above its first offset), one per record for a `written`
        one (it appends no more)."""
        with self._lock:
            db = self._db
            db.execute("BEGIN")        # one snapshot: a writer's state and its records agree
            try:
                spans = [(first, OPEN_END) for first, in db.execute(
                    "SELECT first_offset FROM writers WHERE state = ?", (WRITING,))]
                spans += [(o, o + 1) for o, in db.execute(
                    "SELECT r.offset FROM records r JOIN writers w ON w.writer_id = r.writer_id "
                    "WHERE w.state = ?", (WRITTEN,))]
            finally:
                db.execute("COMMIT")
        return spans

    def unmarked_dead(self) -> dict[str, list[int]]:
        """Dead writers whose records are not all marked in the store yet -> their offsets (in
        order). Found through a partial index: cheap when there are none."""
        out: dict[str, list[int]] = {}
        for writer_id, offset in self._query(
                "SELECT w.writer_id, r.offset FROM writers w INDEXED BY writers_unmarked LEFT "
                "JOIN records r ON r.writer_id = w.writer_id WHERE w.state = 'dead' AND "
                "w.marked = 0 ORDER BY w.writer_id, r.offset"):
            offsets = out.setdefault(writer_id, [])
            if offset is not None:
                offsets.append(offset)
        return out

    def note_marked(self, marked: dict[str, list[int]]) -> None:
        """Remember that the offsets `unmarked_dead` gave are marked in the store: a writer stays
        to mark when it gained a record since (its last offset differs)."""
        with self._tx() as db:
            for writer_id, offsets in marked.items():
                db.execute("UPDATE writers SET marked = 1 WHERE writer_id = ? AND state = ? AND "
                           "coalesce((SELECT max(offset) FROM records WHERE writer_id = ?), -1) = ?",
                           (writer_id, DEAD, writer_id, offsets[-1] if offsets else -1))

    def visible(self, start: int, end: int) -> list[VisibleRecord]:
        return [VisibleRecord(*r) for r in self._query(
            "SELECT offset, rows, bytes FROM records WHERE offset >= ? AND offset < ? "
            "AND visible = 1 ORDER BY offset", (start, end))]

    def visible_iter(self, start: int, end: int, chunk: int = 4096) -> Iterator[VisibleRecord]:
        """Like `visible`, fetched lazily in chunks (a stream limits rows without loading all)."""
        while start < end:
            got = self._query("SELECT offset, rows, bytes FROM records WHERE offset >= ? AND "
                              "offset < ? AND visible = 1 ORDER BY offset LIMIT ?", (start, end, chunk))
            for r in got:
                yield VisibleRecord(*r)
            if len(got) < chunk:
                return
            start = got[-1][0] + 1
    # ------------------------------------------------------------------ inspection
    def jobs(self) -> list[JobInfo]:
        return [JobInfo(*r) for r in self._query(
            "SELECT job_id, kind, state, records, rows, sink_id, batch_id, reason FROM jobs "
            "ORDER BY created_at, job_id")]

    def writer_states(self) -> dict[str, str]:
        return dict(self._query("SELECT writer_id, state FROM writers"))

    def dead_offsets(self, start: int = 0, end: int = 1 << 62) -> list[int]:
        """Offsets of records appended by writers that are dead (aborted jobs, failed task
        attempts, duplicate micro-batches): never visible, safe for a compaction to drop."""
        return [r[0] for r in self._query(
            "SELECT r.offset FROM records r JOIN writers w ON w.writer_id = r.writer_id "
            "WHERE w.state = ? AND r.offset >= ? AND r.offset < ? ORDER BY r.offset",
            (DEAD, start, end))]
