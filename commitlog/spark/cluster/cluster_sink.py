"""The streaming sink into a cluster log: `df.writeStream.format("commitlog").option("path", p)
.option("archive", URL)...start()` (docs/spark-cluster.md, "Streams").

Each micro-batch is a cluster job (`cluster_writer`): its tasks stage their rows on the tier on
any host, the driver commits them in one new manifest version. The job's id is the sink's
identity (option `sinkId`, by default the query's checkpoint location) and the batch id,
`sink_job_id`: a query killed after the commit but before Spark recorded the batch re-runs it on
restart under the same id, and the commit finds the job in the manifest's `jobs` and appends
nothing (`commit.Committed.already`); the re-run's staged objects stay unlisted (the collector's).
Tasks learn the batch id from Spark's local property `streaming.sql.batchId`.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamArrowWriter

from ..staging_errors import StagingError
from .cluster_writer import ClusterTarget, StagedMessage, abort_staged, commit_staged, stage_rows

log = logging.getLogger("commitlog.spark")

BATCH_ID_PROPERTY = "streaming.sql.batchId"     # Spark's MicroBatchExecution sets it for its jobs


def sink_job_id(sink_id: str, batch_id: int) -> str:
    """The cluster job of micro-batch `batch_id` of sink `sink_id`: the same on every run."""
    return f"sink-{hashlib.sha256(sink_id.encode()).hexdigest()[:32]}-{int(batch_id)}"


class ClusterStreamWriter(DataSourceStreamArrowWriter):
    """Pickled to the tasks of every micro-batch; Spark builds one on the driver for each commit."""

    def __init__(self, target: ClusterTarget, sink_id: str) -> None:
        self.target = target
        self.sink_id = sink_id

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedMessage:
        context = TaskContext.get()
        batch = context.getLocalProperty(BATCH_ID_PROPERTY) if context is not None else None
        if batch is None:
            raise StagingError(f"the streaming sink into commit log {self.target.options.path}: this task "
                               f"has no micro-batch id (Spark's local property {BATCH_ID_PROPERTY})")
        return stage_rows(self.target, sink_job_id(self.sink_id, int(batch)), iterator)

    def commit(self, messages, batchId: int) -> None:
        done = commit_staged(self.target, sink_job_id(self.sink_id, batchId), messages)
        if done.already:
            log.info("sink %s micro-batch %d was committed before: not appended again", self.sink_id, batchId)

    def abort(self, messages, batchId: int) -> None:
        abort_staged(self.target, sink_job_id(self.sink_id, batchId), messages)
