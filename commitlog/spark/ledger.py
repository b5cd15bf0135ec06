"""The staging ledger: which records of the log are visible, beside the log in SQLite.

`<log>/spark.db` (WAL, synchronous=FULL) holds what the record store does not know about jobs:
jobs, writers (task attempts), their records and the micro-batches sinks committed (the tables:
`ledger_tables`).

A record is visible exactly when its row says so; everything else in the log (records of aborted
jobs, of failed task attempts, of crashed writers, of other appenders) is invisible to readers.
The records of dead writers are also marked dead in the store (`commitlog.spark.marking`), so a
compaction reclaims them. Streams never move past the first offset of an unresolved writer
(`frontier`), so a job that commits late is never skipped.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from commitlog import CorruptLogError
from commitlog.layout import SPARK_LEDGER_FILE

from . import ledger_tables, liveness
from .errors import JobStateError, NoSchemaError

log = logging.getLogger("commitlog.spark")

LEDGER_FILE = SPARK_LEDGER_FILE

OPEN, COMMITTED, ABORTED = "open", "committed", "aborted"
WRITING, WRITTEN, DEAD = "writing", "written", "dead"
OPEN_END = 1 << 63           # the end of a pending range that may still grow
SINK_BATCHES_KEPT = 1000      # per sink (a restart re-runs only its last uncommitted batches)


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


class Ledger:
    """A handle on `<log>/spark.db`; cheap to open, safe to share between threads of a process,
    and safe between processes through SQLite's locking (every change is one IMMEDIATE
    transaction)."""

    def __init__(self, log_path: str) -> None:
        self.log_path = log_path
        self.path = os.path.join(log_path, LEDGER_FILE)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(self.path, timeout=60.0, isolation_level=None,
                                       check_same_thread=False)
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

    def __enter__(self) -> "Ledger":
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

    def update_schema(self, merge) -> str:
        """Replace the stored schema JSON by `merge(current_json_or_None)` atomically; returns it.
        `merge` raises to refuse (the schema then stays as it was)."""
        with self._tx() as db:
            rows = db.execute("SELECT value FROM staging_meta WHERE key = 'spark_schema'").fetchall()
            current = rows[0][0] if rows else None
            new = merge(current)
            if new != current:
                db.execute("INSERT INTO staging_meta(key, value) VALUES ('spark_schema', ?) "
                           "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (new,))
            return new

    # ------------------------------------------------------------------ jobs (driver)
    def open_job(self, job_id: str, kind: str, owner: liveness.ProcessId | None) -> None:
        with self._tx() as db:
            db.execute("INSERT INTO jobs(job_id, kind, state, created_at, owner_pid, owner_start) "
                       "VALUES (?, ?, ?, ?, ?, ?)",
                       (job_id, kind, OPEN, time.time(), owner.pid if owner else None,
                        owner.start if owner else None))

    def commit_job(self, job_id: str, reports: Iterable[tuple[str, int, int]], *,
                   tasks_job: str | None = None, kind: str = "batch", sink_id: str | None = None,
                   batch_id: int | None = None) -> JobInfo:
        """Make the records of the writers in `reports` ((writer_id, records, rows) from the task
        commit messages) visible, and every other unresolved writer registered under `tasks_job`
        (default `job_id`: failed or duplicate task attempts) dead, in one transaction.

        For a streaming sink (`sink_id`, `batch_id`; its tasks register under the sink's run id,
        `tasks_job`), a micro-batch already committed is not staged again: its new writers are
        made dead instead (reason `duplicate`)."""
        reports = list(reports)
        tasks_job = job_id if tasks_job is None else tasks_job
        now = time.time()
        with self._tx() as db:
            duplicate = False
            if sink_id is not None:
                duplicate = bool(db.execute(
                    "SELECT 1 FROM sink_batches WHERE sink_id = ? AND batch_id = ?",
                    (sink_id, batch_id)).fetchall())
                db.execute("INSERT OR IGNORE INTO jobs(job_id, kind, state, created_at, sink_id, "
                           "batch_id) VALUES (?, ?, ?, ?, ?, ?)",
                           (job_id, kind, OPEN, now, sink_id, batch_id))
            row = db.execute("SELECT state, reason FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
            if row is None:
                raise JobStateError(f"job {job_id} is unknown to the ledger of {self.log_path}")
            if row[0] != OPEN:
                raise JobStateError(f"job {job_id} on {self.log_path} cannot commit: it is already "
                                    f"{row[0]}" + (f" ({row[1]})" if row[1] else ""))
            total_records = total_rows = 0
            ids = []
            for writer_id, records, rows in reports:
                w = db.execute("SELECT state, records, rows FROM writers WHERE writer_id = ?",
                               (writer_id,)).fetchone()
                if w is None or w[0] != WRITTEN:
                    state = "unknown" if w is None else w[0]
                    raise JobStateError(
                        f"job {job_id} on {self.log_path} cannot commit: its writer {writer_id} is "
                        f"{state}, not written (declared abandoned, or its task never finished)")
                if (w[1], w[2]) != (records, rows):
                    raise JobStateError(
                        f"job {job_id} on {self.log_path} cannot commit: writer {writer_id} reported "
                        f"{records} records/{rows} rows but the ledger holds {w[1]}/{w[2]}")
                ids.append(writer_id)
                total_records += records
                total_rows += rows
            others = [r[0] for r in db.execute(
                "SELECT writer_id FROM writers WHERE job_id = ? AND state IN (?, ?)",
                (tasks_job, WRITING, WRITTEN)).fetchall() if r[0] not in set(ids)]
            self._kill_writers(db, others, now)
            if duplicate:
                self._kill_writers(db, ids, now)
                db.execute("UPDATE jobs SET state = ?, finished_at = ?, reason = ? WHERE job_id = ?",
                           (ABORTED, now, f"duplicate of micro-batch {batch_id} of sink {sink_id}",
                            job_id))
                log.info("micro-batch %s of sink %s was already staged in %s; the re-run's %d "
                         "record(s) are dead", batch_id, sink_id, self.log_path, total_records)
                return JobInfo(job_id, kind, ABORTED, 0, 0, sink_id, batch_id, "duplicate")
            for writer_id in ids:
                db.execute("UPDATE records SET visible = 1 WHERE writer_id = ?", (writer_id,))
                db.execute("UPDATE writers SET state = ?, finished_at = ?, job_id = ? "
                           "WHERE writer_id = ?", (COMMITTED, now, job_id, writer_id))
            if sink_id is not None:
                db.execute("INSERT INTO sink_batches(sink_id, batch_id, job_id, committed_at) "
                           "VALUES (?, ?, ?, ?)", (sink_id, batch_id, job_id, now))
                db.execute("DELETE FROM sink_batches WHERE sink_id = ? AND batch_id < ?",
                           (sink_id, batch_id - SINK_BATCHES_KEPT))
                db.execute("DELETE FROM jobs WHERE sink_id = ? AND batch_id < ?",
                           (sink_id, batch_id - SINK_BATCHES_KEPT))
            db.execute("UPDATE jobs SET state = ?, finished_at = ?, records = ?, rows = ? "
                       "WHERE job_id = ?", (COMMITTED, now, total_records, total_rows, job_id))
            return JobInfo(job_id, kind, COMMITTED, total_records, total_rows, sink_id, batch_id, None)

    def abort_job(self, job_id: str, reason: str, writer_ids: Iterable[str] = (), *,
                  tasks_job: str | None = None, kind: str = "batch", sink_id: str | None = None,
                  batch_id: int | None = None) -> None:
        """Make every unresolved writer registered under `tasks_job` (default `job_id`), and
        `writer_ids`, dead; the job is aborted."""
        now = time.time()
        with self._tx() as db:
            ids = [r[0] for r in db.execute(
                "SELECT writer_id FROM writers WHERE job_id = ? AND state IN (?, ?)",
                (job_id if tasks_job is None else tasks_job, WRITING, WRITTEN)).fetchall()]
            self._kill_writers(db, set(ids) | set(writer_ids), now)
            if sink_id is not None:
                db.execute("INSERT OR IGNORE INTO jobs(job_id, kind, state, created_at, sink_id, "
                           "batch_id) VALUES (?, ?, ?, ?, ?, ?)",
                           (job_id, kind, OPEN, now, sink_id, batch_id))
            db.execute("UPDATE jobs SET state = ?, finished_at = ?, reason = ? "
                       "WHERE job_id = ? AND state = ?", (ABORTED, now, reason, job_id, OPEN))

    def sink_batch_committed(self, sink_id: str, batch_id: int) -> bool:
        return bool(self._query("SELECT 1 FROM sink_batches WHERE sink_id = ? AND batch_id = ?",
                                (sink_id, batch_id)))

    @staticmethod
    def _kill_writers(db: sqlite3.Connection, writer_ids: Iterable[str], now: float) -> None:
        for writer_id in writer_ids:
            db.execute("UPDATE writers SET state = ?, finished_at = ? WHERE writer_id = ? "
                       "AND state != ?", (DEAD, now, writer_id, COMMITTED))

    # ------------------------------------------------------------------ writers (tasks)
    def register_writer(self, writer_id: str, job_id: str, first_offset: int,
                        owner: liveness.ProcessId | None) -> None:
        """Called under the append turn, before the writer's first append."""
        me = liveness.identify()
        with self._tx() as db:
            job = db.execute("SELECT state FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
            if job is not None and job[0] != OPEN:
                raise JobStateError(f"job {job_id} on {self.log_path} is already {job[0]}; this "
                                    f"task attempt must not append")
            db.execute("INSERT INTO writers(writer_id, job_id, state, first_offset, pid, pid_start, "
                       "owner_pid, owner_start, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       (writer_id, job_id, WRITING, first_offset, me.pid, me.start,
                        owner.pid if owner else None, owner.start if owner else None, time.time()))

    def add_records(self, writer_id: str, records: list[tuple[int, int, int]]) -> None:
        """(offset, rows, bytes) of records the writer appended (not yet visible)."""
        with self._tx() as db:
            db.executemany("INSERT INTO records(offset, writer_id, rows, bytes) VALUES (?, ?, ?, ?)",
                           [(o, writer_id, r, b) for o, r, b in records])
            # A writer declared dead while it still appended (a speculative attempt outlived by
            # its job's commit): these records are to be marked too.
            db.execute("UPDATE writers SET marked = 0 WHERE writer_id = ? AND marked != 0",
                       (writer_id,))

    def finish_writer(self, writer_id: str) -> tuple[int, int]:
        """The writer's task finished: `written`, awaiting its job's commit. Returns (records,
        rows) as the ledger holds them, for the commit message."""
        with self._tx() as db:
            records, rows = db.execute("SELECT count(*), coalesce(sum(rows), 0) FROM records "
                                       "WHERE writer_id = ?", (writer_id,)).fetchone()
            cur = db.execute("UPDATE writers SET state = ?, records = ?, rows = ?, finished_at = ? "
                             "WHERE writer_id = ? AND state = ?",
                             (WRITTEN, records, rows, time.time(), writer_id, WRITING))
            if cur.rowcount != 1:
                state = db.execute("SELECT state FROM writers WHERE writer_id = ?",
                                   (writer_id,)).fetchone()
                raise JobStateError(f"writer {writer_id} on {self.log_path} is "
                                    f"{state[0] if state else 'unknown'}; its records stay invisible")
            return records, rows

    def kill_writer(self, writer_id: str) -> None:
        with self._tx() as db:
            self._kill_writers(db, [writer_id], time.time())

    # ------------------------------------------------------------------ readers
    def resolve_abandoned(self) -> int:
        """Declare dead the writers nobody can commit any more: a `writing` writer whose task
        process is gone, and any unresolved writer (and open job) whose driver is gone. Returns
        how many writers were declared dead."""
        rows = self._query("SELECT writer_id, state, pid, pid_start, owner_pid, owner_start "
                           "FROM writers WHERE state IN (?, ?)", (WRITING, WRITTEN))
        doomed = []
        for writer_id, state, pid, pid_start, owner_pid, owner_start in rows:
            if not liveness.is_alive(owner_pid, owner_start):
                doomed.append(writer_id)
            elif state == WRITING and not liveness.is_alive(pid, pid_start):
                doomed.append(writer_id)
        jobs = [job_id for job_id, pid, start in self._query(
            "SELECT job_id, owner_pid, owner_start FROM jobs WHERE state = ?", (OPEN,))
            if not liveness.is_alive(pid, start)]
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

    def prune(self, start_offset: int) -> None:
        """Forget records below the log's start offset (removed by retention), and resolved
        writers left with no record."""
        with self._tx() as db:
            db.execute("DELETE FROM records WHERE offset < ?", (start_offset,))
            db.execute("DELETE FROM writers WHERE state IN (?, ?) AND NOT EXISTS "
                       "(SELECT 1 FROM records r WHERE r.writer_id = writers.writer_id)",
                       (COMMITTED, DEAD))

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
