"""commitlog.spark: the commit log as a PySpark 4 data source named `commitlog`, and helpers.

    import commitlog.spark
    commitlog.spark.register(spark)              # the data source, its JVM reader, the progress listener
    commitlog.spark.write(df, p)                 # fast path: one atomic append job
    commitlog.spark.read(spark, p)               # fast path: the committed rows
    spark.readStream.format("commitlog").option("path", p).option("group", "etl").load()
    commitlog.spark.await_termination(query)     # and its group committed up to its last batch

Importing this package imports neither pyspark nor pyarrow (the names that need them load their
module on first use, PEP 562), so the ledger and helpers serve a process without Spark; importing
`commitlog` alone never imports it. Spark's python workers must run this environment's interpreter
(PYSPARK_PYTHON). A log lives on one host: tasks elsewhere fail (WrongHostError), except for
partitions its archive tier holds. Usage, options and how it works: docs, Spark; the modules and
their layering: docs, Development, "Layout".
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
