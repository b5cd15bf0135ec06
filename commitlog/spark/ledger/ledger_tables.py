"""The tables of the staging ledger (`<log>/spark.db`), and bringing an older file up to date.

- `staging_meta`: the log's Spark schema (JSON) and the ledger's format version;
- `writers`: one row per task attempt that appended (a *writer*): its job, its state
  (`writing` -> `written` -> `committed` | `dead`), the first offset it may have written at
  (registered under the append turn before its first append, so no record of it lies below),
  the processes whose death abandons it, and `marked`: 1 once every record the ledger lists for
  a dead writer is marked dead in the store (`CommitLog.mark_dead`; see `commitlog.spark.ledger.marking`);
- `records`: one row per record a writer appended: offset, rows, bytes, and `visible`, set in the
  same transaction that commits the job;
- `jobs`: one row per batch write or streaming micro-batch, with its outcome;
- `sink_batches`: (sink id, micro-batch id) of every micro-batch a streaming sink committed, so a
  restarted query does not stage a batch twice.

The format stays 1: `marked` was added later with a default of 0, so a ledger written before it
simply has every dead writer still to mark (the first catch-up marks them), and code that predates
it never sets it.
"""

from __future__ import annotations

import sqlite3

FORMAT_VERSION = 1

_TABLES = """
CREATE TABLE IF NOT EXISTS staging_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    state TEXT NOT NULL,
    created_at REAL NOT NULL,
    finished_at REAL,
    owner_pid INTEGER,
    owner_start INTEGER,
    sink_id TEXT,
    batch_id INTEGER,
    records INTEGER NOT NULL DEFAULT 0,
    rows INTEGER NOT NULL DEFAULT 0,
    reason TEXT
);
CREATE TABLE IF NOT EXISTS writers (
    writer_id TEXT PRIMARY KEY,
    job_id TEXT NOT NULL,
    state TEXT NOT NULL,
    first_offset INTEGER NOT NULL,
    pid INTEGER NOT NULL,
    pid_start INTEGER,
    owner_pid INTEGER,
    owner_start INTEGER,
    records INTEGER NOT NULL DEFAULT 0,
    rows INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    finished_at REAL,
    marked INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS writers_by_state ON writers(state);
CREATE INDEX IF NOT EXISTS writers_by_job ON writers(job_id);
CREATE TABLE IF NOT EXISTS records (
    offset INTEGER PRIMARY KEY,
    writer_id TEXT NOT NULL,
    rows INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    visible INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS records_by_writer ON records(writer_id);
CREATE TABLE IF NOT EXISTS sink_batches (
    sink_id TEXT NOT NULL,
    batch_id INTEGER NOT NULL,
    job_id TEXT NOT NULL,
    committed_at REAL NOT NULL,
    PRIMARY KEY (sink_id, batch_id)
);
"""

# Dead writers whose records are not all marked yet: what a catch-up looks at, found through this
# small index instead of a walk over every writer the log ever had.
_UNMARKED_INDEX = ("CREATE INDEX IF NOT EXISTS writers_unmarked ON writers(writer_id) "
                   "WHERE state = 'dead' AND marked = 0")


def create(db: sqlite3.Connection) -> None:
    """Create the tables, or add what an older ledger lacks, in one IMMEDIATE transaction (two
    processes opening an older ledger at once add the column once)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        for statement in _TABLES.split(";"):
            if statement.strip():
                db.execute(statement)
        columns = {row[1] for row in db.execute("PRAGMA table_info(writers)")}
        if "marked" not in columns:
            db.execute("ALTER TABLE writers ADD COLUMN marked INTEGER NOT NULL DEFAULT 0")
        db.execute(_UNMARKED_INDEX)
        db.execute("INSERT OR IGNORE INTO staging_meta(key, value) VALUES ('format', ?)",
                   (str(FORMAT_VERSION),))
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
