"""The streaming source: log offsets, ReadMaxRows, AvailableNow exactly once across restarts, the
consumer group's committed offset, the frontier before unresolved writers, and data loss."""

from __future__ import annotations

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from commitlog import CommitLog
from commitlog.spark import DataLossError, await_termination
from commitlog.spark.ledger.ledger import Ledger
from commitlog.spark.ledger.processes import identify
from commitlog.spark.source_options import Options
from commitlog.spark.schema import arrow_schema
from commitlog.spark.source import stored_schema
from commitlog.spark.reading.stream import CommitLogStreamReader

from spark_helpers import ids, load, read_stream, spark_records, stage

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("both_readers")]


def _reader(path: str, **options) -> CommitLogStreamReader:
    opts = Options.parse({"path": path, **{k: str(v) for k, v in options.items()}})
    return CommitLogStreamReader(opts, arrow_schema(stored_schema(path)))


def _stream(spark, path: str, out: str, checkpoint: str, **options):
    return (read_stream(spark, path, **options).writeStream.format("parquet").option("path", out)
            .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())


def _run(query) -> int:
    await_termination(query, 120)
    assert not query.isActive
    if query.exception() is not None:
        raise query.exception()
    return sum(1 for p in query.recentProgress if p["numInputRows"] > 0)


def _committed(path: str, group: str) -> int | None:
    with CommitLog.open(path, readonly=True) as log:
        return log.committed().get(group)


def test_offsets_limits_and_frontier_without_a_query(spark, log_path):
    stage(spark.range(0, 3000, numPartitions=3), log_path)       # 3 records of 1000 rows
    offsets = [o for o, _ in spark_records(log_path)]
    reader = _reader(log_path, group="etl", maxRowsPerTrigger=1500)
    try:
        # Offsets name the log and the group, for the progress listener.
        assert reader.initialOffset() == {"offset": 0, "commitlog": log_path, "group": "etl"}
        assert _reader(log_path).initialOffset() == {"offset": 0, "commitlog": log_path}
        assert reader.getDefaultReadLimit() == ReadMaxRows(1500)
        end = offsets[-1] + 1
        assert reader.latestOffset({"offset": 0}, ReadAllAvailable())["offset"] == end
        # Whole records, at least one, never more than the limit beyond the first.
        assert reader.latestOffset({"offset": 0}, ReadMaxRows(1500))["offset"] == offsets[1]
        assert reader.latestOffset({"offset": 0}, ReadMaxRows(2000))["offset"] == offsets[2]
        assert reader.latestOffset({"offset": 0}, ReadMaxRows(10))["offset"] == offsets[1]
        assert reader.latestOffset({"offset": end}, ReadMaxRows(10))["offset"] == end
        parts = reader.partitions({"offset": 0}, {"offset": offsets[2]})
        assert sum(p.rows for p in parts) == 2000
        assert reader.partitions({"offset": 5}, {"offset": 5}) == []
        # An unresolved writer (a job still running) holds the frontier at its first offset.
        with Ledger(log_path) as ledger:
            ledger.register_writer("w-running", "job-running", end, identify())
        stage(spark.range(3000, 4000, numPartitions=1), log_path)
        assert reader.latestOffset({"offset": 0}, ReadAllAvailable())["offset"] == end
        with Ledger(log_path) as ledger:
            ledger.kill_writer("w-running")
        assert reader.latestOffset({"offset": 0}, ReadAllAvailable())["offset"] > end
        # AvailableNow pins the frontier of its start.
        reader.prepareForTriggerAvailableNow()
        pinned = reader.latestOffset({"offset": 0}, ReadAllAvailable())
        stage(spark.range(4000, 4001, numPartitions=1), log_path)
        assert reader.latestOffset({"offset": 0}, ReadAllAvailable()) == pinned
        # Progress goes to the group's committed offset in the log's consumer state.
        reader.commit({"offset": offsets[1]})
        assert _committed(log_path, "etl") == offsets[1]
        assert _reader(log_path, group="etl").initialOffset()["offset"] == offsets[1]
        assert _reader(log_path, group="other").initialOffset()["offset"] == 0
        latest = _reader(log_path, startingOffset="latest").initialOffset()["offset"]
        assert latest == CommitLog.open(log_path, readonly=True).end_offset
    finally:
        reader.stop()


def test_kafka_option_names_mean_the_same_here(spark, log_path, tmp_path):
    stage(spark.range(0, 3000, numPartitions=3), log_path)       # 3 records of 1000 rows
    offsets = [o for o, _ in spark_records(log_path)]
    kafka = _reader(log_path, startingOffsets="latest", maxRecordsPerTrigger=1500)
    own = _reader(log_path, startingOffset="latest", maxRowsPerTrigger=1500)
    try:
        assert kafka.initialOffset() == own.initialOffset() == {"offset": offsets[-1] + 1,
                                                               "commitlog": log_path}
        assert kafka.getDefaultReadLimit() == ReadMaxRows(1500)
    finally:
        kafka.stop()
        own.stop()
    # A real query: every row, in micro-batches of whole records of at most 1500 rows (one each).
    out = str(tmp_path / "out")
    query = _stream(spark, log_path, out, str(tmp_path / "cp"), startingOffsets="earliest",
                    maxRecordsPerTrigger=1500)
    assert _run(query) == 3
    assert sorted(ids(spark.read.parquet(out))) == list(range(3000))
    for options, message in (({"startingOffsets": "soon"}, '"startingOffsets" must be an integer'),
                             ({"startingOffsets": 0, "startingOffset": 0},
                              '"startingOffsets" and "startingOffset" are one option'),
                             ({"maxRecordsPerTrigger": 0}, '"maxRecordsPerTrigger" must be at least 1'),
                             ({"maxOffsetsPerTrigger": 5}, '"maxOffsetsPerTrigger" is not supported'),
                             ({"startingTimestamp": 1, "startingOffsets": "earliest"},
                              '"startingTimestamp" and "startingOffsets" both say where to start')):
        with pytest.raises(Exception, match=message):
            read_stream(spark, log_path, **options).writeStream.format("noop").start().stop()


def test_abandoned_writers_do_not_block_the_frontier(spark, log_path):
    stage(spark.range(10, numPartitions=1), log_path)
    with Ledger(log_path) as ledger:
        # A writer whose driver died mid-job (its pid and start time no longer name a process).
        ledger.register_writer("w-orphan", "job-orphan", 0, identify()._replace(start=-1))
    reader = _reader(log_path)
    try:
        assert reader.latestOffset({"offset": 0}, ReadAllAvailable())["offset"] == 1
    finally:
        reader.stop()
    with Ledger(log_path) as ledger:
        assert ledger.writer_states()["w-orphan"] == "dead"


def test_available_now_reads_every_row_once_across_restarts(spark, log_path, tmp_path):
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    for base in (0, 3000, 6000):
        stage(spark.range(base, base + 3000, numPartitions=3), log_path)
    query = _stream(spark, log_path, out, checkpoint, group="etl", maxRowsPerTrigger=2500)
    assert _run(query) >= 4                      # 9 records of 1000 rows, at most 2 a batch
    assert sorted(r.id for r in spark.read.parquet(out).collect()) == list(range(9000))
    first = _committed(log_path, "etl")
    assert first == 9                            # the last batch's end: every record consumed
    for base in (9000, 12000):
        stage(spark.range(base, base + 3000, numPartitions=3), log_path)
    assert _run(_stream(spark, log_path, out, checkpoint, group="etl",
                        maxRowsPerTrigger=2500)) >= 3
    assert sorted(r.id for r in spark.read.parquet(out).collect()) == list(range(15000))
    second = _committed(log_path, "etl")
    assert second == 15
    # Nothing new: a restart reads nothing and stages nothing twice.
    _run(_stream(spark, log_path, out, checkpoint, group="etl", maxRowsPerTrigger=2500))
    assert spark.read.parquet(out).count() == 15000


def _rows(spark, start: int, partitions: int):
    # ~110 KB a partition, staged as records of 32 KiB (an eighth of a segment): 6 a segment.
    return spark.range(start, start + partitions * 1000, numPartitions=partitions) \
        .selectExpr("id", "repeat('p', 100) AS pad")


def test_data_removed_by_retention_fails_the_next_batch_naming_the_range(spark, log_path, tmp_path):
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    stage(_rows(spark, 0, 1), log_path, segmentSize="256KiB")
    _run(_stream(spark, log_path, out, checkpoint, group="etl"))          # consumed all of it
    consumed = len(spark_records(log_path))
    stage(_rows(spark, 1000, 6), log_path)
    with CommitLog.open(log_path, readonly=True) as log:
        bases = [s.base_offset for s in log.segments()]
        assert len(bases) >= 4
        # Disk pressure: retention force-deletes the two oldest segments, unconsumed or not.
        assert log.remove_head(force=True).status == "removed"
        assert log.remove_head(force=True).status == "removed"
        new_start = log.start_offset
    assert new_start == bases[2] > consumed
    query = _stream(spark, log_path, out, checkpoint, group="etl")
    with pytest.raises(StreamingQueryException) as failure:
        _run(query)
    message = str(failure.value)
    assert (f"offsets [{consumed}, {new_start}) of commit log {log_path} were removed by "
            f"retention") in message
    assert "consumer group 'etl'" in message and "failOnDataLoss=false" in message
    assert spark.read.parquet(out).count() == 1000
    # failOnDataLoss=false skips the lost range with a warning and reads on from the new start.
    _run(_stream(spark, log_path, out, checkpoint, group="etl", failOnDataLoss="false"))
    kept = sorted(r.id for r in spark.read.parquet(out).collect())
    survivors = ids(load(spark, log_path))                  # what the log still holds
    assert survivors and survivors[0] > 1000
    assert kept == list(range(1000)) + survivors


def test_data_loss_error_names_the_range():
    err = DataLossError("/logs/x", 3, 9, "etl")
    assert "offsets [3, 9) of commit log /logs/x were removed by retention" in str(err)
    assert (err.lost_from, err.lost_to, err.group) == (3, 9, "etl")
