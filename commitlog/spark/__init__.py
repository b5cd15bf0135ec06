"""commitlog.spark: the commit log as a PySpark 4 data source named `commitlog`.

    import commitlog.spark
    commitlog.spark.register(spark)
    df.write.format("commitlog").option("path", p).mode("append").save()
    spark.read.format("commitlog").option("path", p).load()
    spark.readStream.format("commitlog").option("path", p).option("group", "etl").load()
    df.writeStream.format("commitlog").option("path", p).option("checkpointLocation", c).start()

Importing this package imports pyspark and pyarrow; importing `commitlog` alone never does.
Spark's python workers must run this environment's interpreter (PYSPARK_PYTHON). For staging
throughput, start the session with RECOMMENDED_SPARK_CONF (see below).

Modules: options (parsing), schema (the log's schema, the record payload), ledger (which records
are visible: jobs, writers, sink batches, in <log>/spark.db), liveness (abandoned jobs),
appender (task-side appends in turns), target (driver-side preparation of a write), writer
(batch writes), reader (batch reads), stream (the streaming source), sink (the streaming sink),
source (the DataSource Spark instantiates).
"""

from __future__ import annotations

from .errors import (DataLossError, JobStateError, NoSchemaError, OptionError,
                     OverwriteNotSupportedError, SchemaMismatchError, StagingError,
                     WriterTurnTimeout)
from .ledger import JobInfo, Ledger
from .source import CommitLogDataSource, stored_schema

# Session settings recommended for staging through this source (apply them with
# SparkSession.builder.config(map=RECOMMENDED_SPARK_CONF) or spark.conf.set). Spark 4.3 measures
# the Arrow batch it sends to a Python writer after every row unless maxBytesPerBatch is exactly
# 2147483647 (no limit); that check costs about half of the JVM's CPU in a write. Batches stay
# bounded by spark.sql.execution.arrow.maxRecordsPerBatch (10,000 rows by default).
RECOMMENDED_SPARK_CONF = {"spark.sql.execution.arrow.maxBytesPerBatch": "2147483647"}

__all__ = [
    "RECOMMENDED_SPARK_CONF", "CommitLogDataSource", "DataLossError", "JobInfo", "JobStateError",
    "Ledger", "NoSchemaError", "OptionError", "OverwriteNotSupportedError", "SchemaMismatchError",
    "StagingError", "WriterTurnTimeout", "abort_job", "dead_offsets", "jobs", "register",
    "stored_schema",
]


def register(spark) -> type[CommitLogDataSource]:
    """Register the `commitlog` data source on the SparkSession `spark`; returns its class."""
    spark.dataSource.register(CommitLogDataSource)
    return CommitLogDataSource


def jobs(path: str) -> list[JobInfo]:
    """Every staging job of the log at `path` (batch writes and sink micro-batches), oldest first."""
    with Ledger(path) as ledger:
        return ledger.jobs()


def dead_offsets(path: str, start: int = 0, end: int = 1 << 62) -> list[int]:
    """Offsets of records appended by Spark writers that can never become visible (aborted jobs,
    failed task attempts, duplicate micro-batches): what a compaction may drop."""
    with Ledger(path) as ledger:
        return ledger.dead_offsets(start, end)


def abort_job(path: str, job_id: str, reason: str = "aborted by an operator") -> None:
    """Abort an open job by hand (its driver is gone but could not be detected, for example a
    driver on another machine): its records become dead and stop holding back streams."""
    with Ledger(path) as ledger:
        ledger.abort_job(job_id, reason)
