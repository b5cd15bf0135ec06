"""commitlog.spark: the commit log as a PySpark 4 data source named `commitlog`, and helpers.

    import commitlog.spark
    commitlog.spark.register(spark)              # the data source, its JVM reader, the progress listener
    commitlog.spark.write(df, p)                 # fast path: one atomic append job
    commitlog.spark.read(spark, p)               # fast path: the committed rows
    spark.readStream.format("commitlog").option("path", p).option("group", "etl").load()
    df.writeStream.format("commitlog").option("path", p).option("checkpointLocation", c).start()
    commitlog.spark.await_termination(query)     # and its group committed up to its last batch
    df.write.format("commitlog").option("path", p).mode("append").save()    # same as write
    spark.read.format("commitlog").option("path", p).load()                  # same rows as read

Importing this package imports neither pyspark nor pyarrow: the names that need them (`register`,
`read`, `write`, `await_termination`, ...) load their module on first use (PEP 562), so the ledger
(`ledger.marking.pending_ranges`) and the helpers below serve a process without Spark (retention).
Importing `commitlog` alone never imports this package. Spark's python workers must run this
environment's interpreter (PYSPARK_PYTHON). A log lives on one host: tasks on another host than the
planning driver fail (WrongHostError), except for partitions the log's archive tier holds (option
`archive`), which run on any host.

Modules, by concept, each layer importing only the layers above it (writing and reading never each
other):
- staging_errors (its errors), source_options (parsing the data source's options), host (the
  one-host check);
- ledger/, the staging ledger in <log>/spark.db: ledger_tables (its tables), ledger_view (which
  records are visible: what readers ask), ledger (staging into it: jobs, writers, sink batches),
  marking (dead records marked in the store, pending ranges for compaction), processes (whether a
  job's driver or task process still lives: abandoned jobs);
- schema (the log's schema, kept in the ledger; the record payload);
- writing/: target (driver-side preparation of a write), turns (the writer lock taken in turns),
  appender (task-side appends), batch_writer (batch writes), sink (the streaming sink);
  reading/: reader (batch reads), stream (the streaming source);
- the public face: source (the DataSource Spark instantiates), fastpath (read and write helpers),
  progress (the listener committing groups exactly), protector (what compaction must keep, for
  retention), jvm/ (the JVM reader's jar; jvm.read_planner, what the JVM reader calls back to plan;
  jvm.archive_plan, what a plan tells it of a `file://` archive tier, and that an S3 tier is read
  by the Python data source).
"""

from __future__ import annotations

import importlib

from .staging_errors import (DataLossError, JobStateError, NoSchemaError, OptionError,
                     OverwriteNotSupportedError, SchemaMismatchError, StagingError,
                     WriterTurnTimeout, WrongHostError)
from .ledger import JobInfo, Ledger, LedgerView, mark_dead_records, pending_ranges

# Names whose modules import pyspark or pyarrow, loaded on first access.
_LAZY = {
    "FAST_WRITE_CONF": "fastpath", "read": "fastpath", "write": "fastpath",
    "await_termination": "progress",
    "CommitLogDataSource": "source", "register": "source", "stored_schema": "source",
    # The settings `write` applies for its job alone; setting them on a whole session (as before
    # the helpers existed) makes `df.write.format("commitlog")` as fast, and lifts the Arrow byte
    # bound for every Python path of that session.
    "RECOMMENDED_SPARK_CONF": "fastpath",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value        # later accesses skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "FAST_WRITE_CONF", "RECOMMENDED_SPARK_CONF", "CommitLogDataSource", "DataLossError", "JobInfo",
    "JobStateError", "Ledger", "LedgerView", "NoSchemaError", "OptionError", "OverwriteNotSupportedError",
    "SchemaMismatchError", "StagingError", "WriterTurnTimeout", "WrongHostError", "abort_job",
    "await_termination", "dead_offsets", "jobs", "mark_dead_records", "pending_ranges", "read",
    "register", "stored_schema", "write",
]


def jobs(path: str) -> list[JobInfo]:
    """Every staging job of the log at `path` (batch writes and sink micro-batches), oldest first."""
    with LedgerView(path) as ledger:
        return ledger.jobs()


def dead_offsets(path: str, start: int = 0, end: int = 1 << 62) -> list[int]:
    """Offsets of records appended by Spark writers that can never become visible (aborted jobs,
    failed task attempts, duplicate micro-batches): what a compaction may drop."""
    with LedgerView(path) as ledger:
        return ledger.dead_offsets(start, end)


def abort_job(path: str, job_id: str, reason: str = "aborted by an operator") -> None:
    """Abort an open job by hand (its driver is gone but could not be detected, for example a
    driver on another machine): its records become dead and stop holding back streams."""
    with Ledger(path) as ledger:
        ledger.abort_job(job_id, reason)
        mark_dead_records(path, ledger)
