"""The helpers `commitlog.spark.read` and `write` against `format("commitlog")`: same rows, same
partitions, same options and errors; `write` applies its settings for its job alone; one host."""

from __future__ import annotations

import re
import socket
import threading
from dataclasses import replace

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

import commitlog.spark
from commitlog import CommitLog
from commitlog.spark import FAST_WRITE_CONF, WrongHostError, fastpath
from commitlog.spark.source_options import Options
from commitlog.spark.reading.reader import LogPartition, read_partition
from commitlog.spark.schema import arrow_schema
from commitlog.spark.writing.target import prepare_write
from commitlog.spark.writing.batch_writer import CommitLogBatchWriter

import spark_helpers
from spark_helpers import ids, load, spark_records, stage
from test_spark_roundtrip import ALL_TYPES, _row

pytestmark = pytest.mark.spark

KEY = next(iter(FAST_WRITE_CONF))


def _both(spark, path: str, **options):
    """(helper's DataFrame, data source's DataFrame) for the same log and options."""
    return commitlog.spark.read(spark, path, **options), load(spark, path, **options)


def _same(spark, path: str, **options) -> list:
    fast, slow = _both(spark, path, **options)
    assert fast.schema == slow.schema
    assert fast.rdd.getNumPartitions() == slow.rdd.getNumPartitions()
    rows = fast.rdd.glom().collect()
    assert rows == slow.rdd.glom().collect()          # partition by partition, in log order
    return [r for part in rows for r in part]


def test_read_returns_what_the_data_source_returns_for_every_type(spark, log_path):
    df = spark.createDataFrame([_row(i) for i in range(60)], ALL_TYPES).repartition(3)
    commitlog.spark.write(df, log_path)
    got = _same(spark, log_path)
    assert sorted(got) == sorted(df.collect())
    tz = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:                                   # timestamps are UTC in the log whatever the session's
        assert sorted(commitlog.spark.read(spark, log_path).collect()) == \
            sorted(load(spark, log_path).collect())
    finally:
        spark.conf.set("spark.sql.session.timeZone", tz)


def test_read_variant_and_geometry(spark, log_path):
    df = spark.sql("""SELECT id, parse_json(concat('{"a": ', id, '}')) AS v,
                      st_geomfromwkb(X'0101000000000000000000F03F0000000000000040') AS g
                      FROM range(5)""")
    stage(df, log_path)
    fast, slow = _both(spark, log_path)
    as_text = "id", "to_json(v) AS v", "hex(st_asbinary(g)) AS g"
    assert fast.schema == slow.schema == df.schema
    assert sorted(fast.selectExpr(*as_text).collect()) == sorted(slow.selectExpr(*as_text).collect())


def test_read_an_empty_log_and_a_missing_one(spark, log_path, tmp_path):
    schema = StructType([StructField("id", LongType()), StructField("s", StringType())])
    commitlog.spark.write(spark.createDataFrame([], schema), log_path)
    fast, slow = _both(spark, log_path)
    assert fast.schema == slow.schema == schema and fast.collect() == slow.collect() == []
    with pytest.raises(commitlog.spark.NoSchemaError, match="write a DataFrame to it first"):
        commitlog.spark.read(spark, str(tmp_path / "nowhere"))


def test_read_offsets_partitions_and_options_as_the_data_source(spark, log_path):
    for start in range(0, 40, 10):                      # four jobs of one record each
        stage(spark.range(start, start + 10, numPartitions=1), log_path)
    offsets = [o for o, _ in spark_records(log_path)]
    assert [r.id for r in _same(spark, log_path)] == list(range(40))
    window = _same(spark, log_path, startOffset=offsets[1], endOffset=offsets[3])
    assert [r.id for r in window] == list(range(10, 30))
    assert _same(spark, log_path, startOffset=offsets[3] + 1) == []
    stage(spark.range(100, 200_100, numPartitions=4), log_path)
    assert len(_same(spark, log_path, maxPartitionBytes="300KiB")) == 200_040
    assert commitlog.spark.read(spark, log_path, maxPartitionBytes="300KiB") \
        .rdd.getNumPartitions() > 2
    with pytest.raises(commitlog.spark.OptionError, match='"endOffset" .* is below "startOffset"'):
        commitlog.spark.read(spark, log_path, startOffset=5, endOffset=2)


def _lose_head(spark, log_path: str) -> int:
    """Stage records over several 256 KiB segments, then force-remove the first two (disk
    pressure); returns the log's new start offset."""
    stage(spark.range(0, 6000, numPartitions=6).selectExpr("id", "repeat('p', 100) AS pad"),
          log_path, segmentSize="256KiB")
    with CommitLog.open(log_path, readonly=True) as log:
        assert log.remove_head(force=True).status == "removed"
        assert log.remove_head(force=True).status == "removed"
        return log.start_offset


def test_a_range_removed_by_retention_fails_or_is_skipped_as_with_the_data_source(
        spark, log_path):
    start = _lose_head(spark, log_path)
    lost = f"offsets [0, {start}) of commit log {log_path} were removed by retention"
    with pytest.raises(commitlog.spark.DataLossError, match=re.escape(lost)):
        commitlog.spark.read(spark, log_path, startOffset=0)
    with pytest.raises(Exception, match=re.escape(lost)):
        load(spark, log_path, startOffset=0).collect()
    kept = _same(spark, log_path, startOffset=0, failOnDataLoss="false")
    assert kept and len(kept) == len(ids(load(spark, log_path)))


def test_a_range_removed_after_planning_fails_the_task_or_is_skipped(spark, log_path):
    stage(spark.range(0, 6000, numPartitions=6).selectExpr("id", "repeat('p', 100) AS pad"),
          log_path, segmentSize="256KiB")
    planned = commitlog.spark.read(spark, log_path)              # partitions planned now
    skipping = commitlog.spark.read(spark, log_path, failOnDataLoss="false")
    with CommitLog.open(log_path, readonly=True) as log:
        assert log.remove_head(force=True).status == "removed"
        start = log.start_offset
    with pytest.raises(Exception, match=rf"offsets \[0, {start}\) of commit log .* removed by "):
        planned.collect()
    assert sorted(r.id for r in skipping.collect()) == ids(load(spark, log_path))


def test_write_stages_atomically_and_restores_the_session_settings(spark, log_path):
    spark.conf.unset(KEY)
    commitlog.spark.write(spark.range(0, 1000, numPartitions=2), log_path, segmentSize="1MiB")
    assert spark.conf.get(KEY, None) is None                    # unset before, unset after
    spark.conf.set(KEY, "1000000")
    try:
        commitlog.spark.write(spark.range(1000, 2000, numPartitions=2), log_path)
        assert spark.conf.get(KEY) == "1000000"                  # the session's own value back
        wrong = spark.range(3).selectExpr("cast(id AS string) AS id")
        with pytest.raises(Exception, match="column .id. is bigint in the log but string"):
            commitlog.spark.write(wrong, log_path)
        assert spark.conf.get(KEY) == "1000000"                  # also after a failure
        failing = spark.range(0, 10, numPartitions=1) \
            .selectExpr("id + length(raise_error('boom')) AS id")
        with pytest.raises(Exception, match="boom"):
            commitlog.spark.write(failing, log_path)
        assert spark.conf.get(KEY) == "1000000"                  # and after a failed job
    finally:
        spark.conf.unset(KEY)
    assert ids(commitlog.spark.read(spark, log_path)) == list(range(2000))
    with CommitLog.open(log_path, readonly=True) as log:
        assert log.segment_size == 1 << 20


def _executions(spark) -> list:
    """The session's SQL executions, once Spark's listener (asynchronous) recorded every event."""
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty(30_000)
    executions = spark._jsparkSession.sharedState().statusStore().executionsList()
    return [executions.apply(i) for i in range(executions.size())]


def _bytes_sent_to_python(spark) -> int:
    """Spark's "data sent to Python workers" metric of the last execution, in bytes. Spark 4.3
    keeps the metric on the data source and adds every write of the session to it: compare two."""
    metrics = _executions(spark)[-1].metrics().iterator()
    while metrics.hasNext():
        metric = metrics.next()
        if metric.name() == "data sent to Python workers":
            accumulator = spark._jvm.org.apache.spark.util.AccumulatorContext.get(
                metric.accumulatorId())
            return int(accumulator.get().value())
    raise AssertionError("the write sent nothing to Python workers")


def test_a_format_write_lifts_the_byte_bound_in_its_tasks_not_in_the_session(spark, tmp_path):
    # A session bound of 256 bytes makes Spark cut its Arrow batches every few rows: each batch
    # framed again on its way to the Python writer. The JVM data source lifts the bound in its own
    # write tasks (one batch per 10,000 rows: about the column's 8 bytes a row are sent), the
    # Python data source alone cannot; the session keeps its bound for every other job.
    spark.conf.set(KEY, "256")
    sent = {}
    try:
        for source in spark_helpers.READERS:
            totals = []
            for rows in (range(1000), range(1000, 4000)):
                (spark.range(rows.start, rows.stop, numPartitions=1).write.format(source)
                 .option("path", str(tmp_path / source)).mode("append").save())
                totals.append(_bytes_sent_to_python(spark))
            sent[source] = totals[1] - totals[0]                # the second write's 3000 rows
            assert spark.conf.get(KEY) == "256"
        commitlog.spark.write(spark.range(4000, 5000, numPartitions=1), str(tmp_path / "commitlog"))
        assert spark.conf.get(KEY) == "256"
    finally:
        spark.conf.unset(KEY)
    assert sent["commitlog"] < 3000 * 8 + 2048 < sent["commitlog_python"], sent
    assert ids(load(spark, str(tmp_path / "commitlog"))) == list(range(5000))


def test_fast_write_conf_is_shared_by_concurrent_writes_and_restored_by_the_last(spark, tmp_path):
    spark.conf.set(KEY, "12345")
    try:
        entered, release = threading.Barrier(3), threading.Event()
        seen: list[str] = []

        def user() -> None:
            with fastpath.fast_write_conf(spark):
                seen.append(spark.conf.get(KEY))
                entered.wait(30)
                release.wait(30)

        threads = [threading.Thread(target=user) for _ in range(2)]
        for t in threads:
            t.start()
        entered.wait(30)
        assert seen == [FAST_WRITE_CONF[KEY]] * 2
        release.set()
        threads[0].join(30)
        threads[1].join(30)
        assert spark.conf.get(KEY) == "12345"
        # Two real writes from two threads land whole; the setting comes back after both.
        errors: list[BaseException] = []

        def job(base: int) -> None:
            try:
                spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
                commitlog.spark.write(spark.range(base, base + 50_000, numPartitions=1),
                                      str(tmp_path / "log"))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        commitlog.spark.write(spark.range(0, 1, numPartitions=1), str(tmp_path / "log"))
        writers = [threading.Thread(target=job, args=(b,)) for b in (100_000, 200_000)]
        for t in writers:
            t.start()
        for t in writers:
            t.join(120)
        assert not errors, errors
        assert spark.conf.get(KEY) == "12345"
        assert ids(commitlog.spark.read(spark, str(tmp_path / "log"))) == \
            [0] + list(range(100_000, 150_000)) + list(range(200_000, 250_000))
    finally:
        spark.conf.unset(KEY)


def test_a_task_on_another_host_than_the_planner_fails_naming_both(spark, log_path, monkeypatch):
    here = socket.gethostname()
    stage(spark.range(0, 100, numPartitions=1), log_path)
    before = spark_records(log_path)
    # A write planned on another host: its tasks refuse to append here.
    target = replace(prepare_write(Options.parse({"path": log_path}), spark.range(1).schema,
                                   "batch"), host="planner-elsewhere")
    writer = CommitLogBatchWriter(target)

    def write_task(_):
        batch = pa.record_batch([pa.array([7, 8], pa.int64())], names=["id"])
        yield writer.write(iter([batch]))

    message = (rf"commit log {log_path} is on host 'planner-elsewhere', where this write was "
               rf"planned, but this Spark task runs on host '{here}'")
    with pytest.raises(Exception, match=message):
        spark.sparkContext.parallelize([0], 1).mapPartitions(write_task).collect()
    assert spark_records(log_path) == before                    # nothing written here
    # A read planned on another host (the helper plans in this process): its tasks refuse.
    monkeypatch.setattr("commitlog.spark.reading.reader.this_host", lambda: "planner-elsewhere")
    df = commitlog.spark.read(spark, log_path)
    with pytest.raises(Exception, match=message.replace("write", "read")):
        df.collect()
    part = LogPartition(((0, 1),), 100, 1, "planner-elsewhere")
    with pytest.raises(WrongHostError) as failure:
        next(read_partition(Options.parse({"path": log_path}),
                            arrow_schema(spark.range(1).schema), part))
    assert (failure.value.planned_on, failure.value.running_on) == ("planner-elsewhere", here)
