"""The streaming sink: `df.writeStream.format("commitlog").option("path", p)...start()`.

Each micro-batch is a job: tasks append as in a batch write; the driver's `commit(messages,
batchId)` makes the batch visible in one ledger transaction that also records (sink id, batch id).
A micro-batch id already recorded is not staged again: a query killed after the sink committed
but before Spark recorded the batch re-runs it on restart, and that re-run's records are made
dead instead (and marked dead in the store: `ledger.marking`). The sink id is option `sinkId`, by
default the query's checkpoint location.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter

from .appender import Appender
from ..ledger.ledger import Ledger
from ..ledger.marking import mark_dead_records
from .target import WriteTarget
from .batch_writer import AppendedMessage, reports

log = logging.getLogger("commitlog.spark")


class CommitLogStreamWriter(DataSourceStreamArrowWriter):
    """Pickled to the tasks of every micro-batch; Spark also builds a fresh one on the driver
    for each commit, so everything a commit needs travels in the messages and `batchId`."""

    def __init__(self, target: WriteTarget, sink_id: str) -> None:
        self.target = target
        self.sink_id = sink_id

    def write(self, iterator: Iterator[pa.RecordBatch]) -> AppendedMessage:
        writer_id, records, rows = Appender(self.target).write_all(iterator)
        return AppendedMessage(writer_id, records, rows)

    def _job_id(self, batch_id: int) -> str:
        # One job per attempt to commit or abort a micro-batch; a re-run is a new job.
        return f"{self.target.job_id}-batch-{batch_id}-{uuid.uuid4().hex[:8]}"

    def commit(self, messages, batchId: int) -> None:
        job_id = self._job_id(batchId)
        with Ledger(self.target.options.path) as ledger:
            job = ledger.commit_job(job_id, reports(messages), tasks_job=self.target.job_id,
                                    kind="stream", sink_id=self.sink_id, batch_id=batchId)
            mark_dead_records(self.target.options.path, ledger)   # a duplicate, failed attempts
        log.info("sink %s micro-batch %d: %s, %d record(s), %d row(s) in %s", self.sink_id,
                 batchId, job.state, job.records, job.rows, self.target.options.path)

    def abort(self, messages, batchId: int) -> None:
        ids = [r[0] for r in reports(messages)]
        with Ledger(self.target.options.path) as ledger:
            ledger.abort_job(self._job_id(batchId),
                             f"micro-batch {batchId} aborted by Spark", ids,
                             tasks_job=self.target.job_id, kind="stream", sink_id=self.sink_id,
                             batch_id=batchId)
            mark_dead_records(self.target.options.path, ledger)
        log.warning("sink %s micro-batch %d aborted: its records in %s are dead", self.sink_id,
                    batchId, self.target.options.path)
