"""Staging into the ledger: jobs (the driver's), writers (its tasks'), the records they append
and the micro-batches sinks commit. `Ledger` is a `LedgerView` (see `commitlog.spark.ledger.ledger_view`
for the file and what a record's visibility means) that also writes: a job's commit makes its
writers' records visible in one transaction, and dooms every other writer of the job.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Iterable

from . import processes
from ..staging_errors import JobStateError
from .ledger_view import (ABORTED, COMMITTED, DEAD, LEDGER_FILE, OPEN, OPEN_END, WRITING, WRITTEN, JobInfo,
                          LedgerView, VisibleRecord)

log = logging.getLogger("commitlog.spark")

SINK_BATCHES_KEPT = 1000      # per sink (a restart re-runs only its last uncommitted batches)

__all__ = ["ABORTED", "COMMITTED", "DEAD", "LEDGER_FILE", "OPEN", "OPEN_END", "WRITING", "WRITTEN", "JobInfo",
           "Ledger", "LedgerView", "VisibleRecord"]


class Ledger(LedgerView):
    """A `LedgerView` that stages: safe to share between threads of a process and between
    processes, as the view is (every change is one IMMEDIATE transaction)."""

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
    def open_job(self, job_id: str, kind: str, owner: processes.ProcessId | None) -> None:
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
            self._check_open(db, job_id)
            ids, total_records, total_rows = self._reported_writers(db, job_id, reports)
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
            self._publish(db, job_id, ids, now, sink_id, batch_id)
            db.execute("UPDATE jobs SET state = ?, finished_at = ?, records = ?, rows = ? "
                       "WHERE job_id = ?", (COMMITTED, now, total_records, total_rows, job_id))
            return JobInfo(job_id, kind, COMMITTED, total_records, total_rows, sink_id, batch_id, None)

    def _check_open(self, db, job_id: str) -> None:
        """JobStateError unless job `job_id` is known and still open (in transaction `db`)."""
        row = db.execute("SELECT state, reason FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        if row is None:
            raise JobStateError(f"job {job_id} is unknown to the ledger of {self.log_path}")
        if row[0] != OPEN:
            raise JobStateError(f"job {job_id} on {self.log_path} cannot commit: it is already "
                                f"{row[0]}" + (f" ({row[1]})" if row[1] else ""))

    def _reported_writers(self, db, job_id: str,
                          reports: list[tuple[str, int, int]]) -> tuple[list[str], int, int]:
        """(writer ids, records, rows) of `reports`, each writer checked to be written with the
        figures its task reported (JobStateError otherwise)."""
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
        return ids, total_records, total_rows

    @staticmethod
    def _publish(db, job_id: str, ids: list[str], now: float, sink_id: str | None,
                 batch_id: int | None) -> None:
        """Make the records of writers `ids` visible and the writers committed under `job_id`; for
        a sink, record the micro-batch and forget those older than SINK_BATCHES_KEPT."""
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
    @staticmethod
    def _kill_writers(db: sqlite3.Connection, writer_ids: Iterable[str], now: float) -> None:
        for writer_id in writer_ids:
            db.execute("UPDATE writers SET state = ?, finished_at = ? WHERE writer_id = ? "
                       "AND state != ?", (DEAD, now, writer_id, COMMITTED))

    # ------------------------------------------------------------------ writers (tasks)
    def register_writer(self, writer_id: str, job_id: str, first_offset: int,
                        owner: processes.ProcessId | None) -> None:
        """Called under the append turn, before the writer's first append."""
        me = processes.identify()
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

    def prune(self, start_offset: int) -> None:
        """Forget records below the log's start offset (removed by retention), and resolved
        writers left with no record."""
        with self._tx() as db:
            db.execute("DELETE FROM records WHERE offset < ?", (start_offset,))
            db.execute("DELETE FROM writers WHERE state IN (?, ?) AND NOT EXISTS "
                       "(SELECT 1 FROM records r WHERE r.writer_id = writers.writer_id)",
                       (COMMITTED, DEAD))

