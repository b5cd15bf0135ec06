"""Batch writes: `df.write.format("commitlog").option("path", p).mode("append").save()`.

A job is atomic. Each task appends its Arrow batches as records (see `appender`) and reports its
writer in the commit message; the driver's `commit` makes exactly the reported writers' records
visible, in one ledger transaction, and every other writer of the job (a failed or duplicate
task attempt) dead. `abort` (a task failed, or raised `StoreFullError` under disk pressure) makes
all of the job's records dead: readers see none of them. Dead records are then marked dead in the
store, for a compaction to reclaim (`ledger.marking`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from .appender import Appender
from ..ledger.ledger import Ledger
from ..ledger.marking import mark_dead_records
from .target import WriteTarget

log = logging.getLogger("commitlog.spark")


@dataclass(frozen=True)
class AppendedMessage(WriterCommitMessage):
    """What one task appended: its writer id (None if it had no rows), records and rows."""

    writer_id: str | None
    records: int
    rows: int


def reports(messages) -> list[tuple[str, int, int]]:
    return [(m.writer_id, m.records, m.rows) for m in messages
            if isinstance(m, AppendedMessage) and m.writer_id is not None]


class CommitLogBatchWriter(DataSourceArrowWriter):
    """The writer of one batch job (pickled to every task)."""

    def __init__(self, target: WriteTarget) -> None:
        self.target = target

    def write(self, iterator: Iterator[pa.RecordBatch]) -> AppendedMessage:
        writer_id, records, rows = Appender(self.target).write_all(iterator)
        return AppendedMessage(writer_id, records, rows)

    def commit(self, messages) -> None:
        with Ledger(self.target.options.path) as ledger:
            job = ledger.commit_job(self.target.job_id, reports(messages))
            mark_dead_records(self.target.options.path, ledger)   # attempts it left out
        log.info("job %s committed %d record(s), %d row(s) to %s", job.job_id, job.records,
                 job.rows, self.target.options.path)

    def abort(self, messages) -> None:
        ids = [r[0] for r in reports(messages)]
        with Ledger(self.target.options.path) as ledger:
            ledger.abort_job(self.target.job_id, "aborted by Spark (a task failed)", ids)
            mark_dead_records(self.target.options.path, ledger)
        log.warning("job %s aborted: its records in %s are dead", self.target.job_id,
                    self.target.options.path)
