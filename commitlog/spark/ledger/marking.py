"""What the store must know of Spark's ledger for a compaction: which records are dead (marked
through `CommitLog.mark_dead`) and which may still become visible (`pending_ranges`).

Imports neither pyspark nor pyarrow: retention calls `pending_ranges` without them.

`mark_dead_records` marks the records of every dead writer whose `marked` flag is still 0, then
sets the flag; it is called right after each ledger transaction that makes a writer dead, and as
the catch-up when a job, a read or a stream opens the log. Invariant: marks follow the ledger's
decision, never lead it (ledger commits the writer dead, the store marks, the ledger sets
`marked`), so a crash leaves records unmarked for the next catch-up, never a committed row marked.
A failure to mark is logged, never fails the Spark job. The order's reasoning: docs, Spark ("How
it works inside"). Works while another process writes: the log is opened read-only and markers
serialise on the store's marks lock.
"""

from __future__ import annotations

import logging
import os
import sqlite3

from commitlog import CommitLog, CommitLogError

from .ledger_view import LedgerView

log = logging.getLogger("commitlog.spark")


def mark_dead_records(log_path: str, ledger: LedgerView | None = None,
                      clog: CommitLog | None = None) -> int:
    """Mark in the store every record of the ledger's dead writers not marked yet; returns how
    many records were newly marked. Idempotent and cheap when there is nothing to mark (one
    indexed query, the log not opened). Uses `ledger` / `clog` when given (not closed here).
    Never raises for a failure to mark (logged; the next call retries): it runs right after a
    job's commit, which must not be reported failed once its rows are visible."""
    try:
        if ledger is not None:
            return _mark_unmarked(log_path, ledger, clog)
        with LedgerView(log_path) as own:
            return _mark_unmarked(log_path, own, clog)
    except (CommitLogError, OSError, sqlite3.Error) as exc:
        log.warning("could not mark the dead Spark records of %s (retried when a job, read or "
                    "stream opens it): %s", log_path, exc)
        return 0


def _mark_unmarked(log_path: str, ledger: LedgerView, clog: CommitLog | None) -> int:
    todo = ledger.unmarked_dead()
    if not todo:
        return 0
    offsets = sorted(o for found in todo.values() for o in found)
    newly = _mark(log_path, offsets, clog) if offsets else 0
    ledger.note_marked(todo)             # only once the marks are durable
    if newly:
        log.info("marked %d record(s) of %d dead Spark writer(s) dead in %s", newly, len(todo),
                 log_path)
    return newly


def _mark(log_path: str, offsets: list[int], clog: CommitLog | None) -> int:
    if clog is not None:
        return clog.mark_dead(offsets)
    with CommitLog.open(log_path, readonly=True) as handle:
        return handle.mark_dead(offsets)


def pending_ranges(log_path: str | os.PathLike) -> list[tuple[int, int]]:
    """Sorted, disjoint [start, end) offset ranges of the log at `log_path` that a Spark job that
    has not finished may still make visible: a compaction keeps every record in them, marked or
    not (policies.liveness.PendingRanges). Empty when the log has no `spark.db`.

    A task attempt still writing contributes [its first offset, 2**63) (it may append anywhere
    above: conservative), one that finished writing the exact offsets of its records. Call it
    after choosing the segments to compact: a writer that registers later appends at or above
    the log's end of this call. Reads only: a job whose driver died stays pending until a Spark
    stream on the log declares it abandoned (`resolve_abandoned`) or an operator aborts it
    (`commitlog.spark.abort_job`). Read through a read-only connection: no file of the log
    directory made, changed or removed but SQLite's `-wal` and `-shm`, which it leaves in place.
    CorruptLogError when spark.db is unreadable."""
    path = os.fspath(log_path)
    if not LedgerView.exists(path):
        return []
    with LedgerView(path, readonly=True) as ledger:
        spans = sorted(ledger.pending_spans())
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged
