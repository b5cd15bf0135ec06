"""The fast path: `read(spark, path, **options)` and `write(df, path, **options)`.

`read` plans partitions exactly as `format("commitlog")` does (same options, same partitioning
rule, same data-loss errors), now, and reads them with the JVM reader (`format("commitlog")` given
the plan) when `register` installed it and no S3 tier is read; else through `mapInArrow` over a
DataFrame of partition numbers (Python workers yield the Arrow batches; Spark turns them into rows
once).

`write` is `df.write.format("commitlog")...save()`. The settings that make a write fast
(`FAST_WRITE_CONF`, lifting a byte bound on the Arrow batches sent to Python workers; batches stay
bounded by `spark.sql.execution.arrow.maxRecordsPerBatch` rows) are applied by the JVM data source
to its own write tasks alone when `register` installed it. Without it, `write` sets them on the
session for the job and puts the session's own values back afterwards, also when the write fails;
Spark's runtime settings belong to the session, so other jobs of the session (other threads) see
them meanwhile. Concurrent `write` calls on one session share them: the first sets them, the last
to finish restores the values it found. Thread-safe.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator

import pyarrow as pa

from . import jvm
from .jvm.archive_plan import jvm_reads
from .jvm.read_planner import plan_json
from .staging_errors import NoSchemaError
from .source_options import Options
from .reading.reader import CommitLogBatchReader, read_partition
from .schema import arrow_schema, log_schema
from .source import register

# Spark 4.3 measures the Arrow batch it sends to a Python writer after every row unless
# maxBytesPerBatch is exactly 2147483647 (no limit); that check costs about half of the JVM's CPU
# in a write. Batches stay bounded by spark.sql.execution.arrow.maxRecordsPerBatch rows.
FAST_WRITE_CONF = {"spark.sql.execution.arrow.maxBytesPerBatch": "2147483647"}
RECOMMENDED_SPARK_CONF = FAST_WRITE_CONF   # the same settings, for a whole session

_conf_lock = threading.Lock()
_conf_users: dict[int, tuple[int, dict[str, str | None]]] = {}   # session -> (writers, saved)


def _options(path: str, options: dict) -> dict[str, str]:
    # Resolved here, in the driver's Python: Spark's Python workers run in the JVM's directory.
    path = os.path.abspath(os.path.expanduser(str(path)))
    return {"path": path, **{str(k): str(v) for k, v in options.items()}}


def read(spark, path: str, **options):
    """The committed rows of the log at `path` as a DataFrame, as
    `spark.read.format("commitlog").option("path", path)` with `options` would return them.
    Partitions are planned now, on the driver: however often the DataFrame is computed, it reads
    the records committed at this call (the data source plans at each action instead). The JVM
    reader reads them when `register(spark)` installed it, else Python workers (`mapInArrow`);
    with `archive=URL` (docs/archive.md) the archived part runs on any host, read by the JVM from
    a `file://` tier and by Python workers from an `s3://` one."""
    register(spark)
    opts = Options.parse(_options(path, options))
    struct = log_schema(opts)
    if struct is None:
        raise NoSchemaError(
            f"commit log {opts.path} has no staged schema: write a DataFrame to it first "
            f"(commitlog.spark.write(df, path))")
    schema = arrow_schema(struct)
    parts = CommitLogBatchReader(opts, schema).partitions()
    # The JVM reader reads the partitions planned here (and a file:// tier's objects), not S3's.
    if jvm.installed(spark) and jvm_reads(opts):
        return (spark.read.format("commitlog").schema(struct).option("path", opts.path)
                .option("plan", json.dumps(plan_json(opts, parts))).load())
    if not parts:     # one empty partition, as Spark gives a source that plans none
        return spark.createDataFrame([], struct).coalesce(1)
    schema_ipc = schema.serialize().to_pybytes()

    def run(numbers: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        wanted = pa.ipc.read_schema(pa.py_buffer(schema_ipc))
        for batch in numbers:
            for number in batch.column(0).to_pylist():
                yield from read_partition(opts, wanted, parts[number])

    return spark.range(len(parts), numPartitions=len(parts)).mapInArrow(run, struct)


def write(df, path: str, **options) -> None:
    """Append `df` to the log at `path` (created if missing) as one atomic job, as
    `df.write.format("commitlog").option("path", path).mode("append").save()` would, with
    `FAST_WRITE_CONF` applied for this job only."""
    spark = df.sparkSession
    register(spark)
    writer = df.write.format("commitlog").mode("append")
    for key, value in _options(path, options).items():
        writer = writer.option(key, value)
    if jvm.installed(spark):          # the JVM data source lifts the bound in its tasks alone
        writer.save()
        return
    with fast_write_conf(spark):
        writer.save()


@contextlib.contextmanager
def fast_write_conf(spark) -> Iterator[None]:
    """Set FAST_WRITE_CONF on `spark` for the block; restore the session's values after the last
    concurrent user of the block leaves it, whatever happened inside."""
    key = id(spark)
    with _conf_lock:
        users, saved = _conf_users.get(key, (0, {}))
        if users == 0:
            saved = {name: spark.conf.get(name, None) for name in FAST_WRITE_CONF}
            for name, value in FAST_WRITE_CONF.items():
                spark.conf.set(name, value)
        _conf_users[key] = (users + 1, saved)
    try:
        yield
    finally:
        with _conf_lock:
            users, saved = _conf_users.pop(key)
            if users > 1:
                _conf_users[key] = (users - 1, saved)
            else:
                for name, value in saved.items():
                    if value is None:
                        spark.conf.unset(name)
                    else:
                        spark.conf.set(name, value)

