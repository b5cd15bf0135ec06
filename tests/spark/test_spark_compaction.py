"""The Spark reader over a compacted log: records outside the committed rows (an aborted job's)
marked dead and compacted away leave gaps inside the planned runs; the same rows read back; and
a stream whose group sits before such records restarts past them (both readers)."""

from __future__ import annotations

import time

import pytest

from commitlog import CommitLog
from commitlog.spark import await_termination

from spark_helpers import ids, load, read_stream, stage


def test_a_log_reads_the_same_rows_after_compaction_removed_records_between_them(spark, log_path):
    stage(spark.range(0, 300, numPartitions=1), log_path, segmentSize=4096)
    with CommitLog.open(log_path) as log:  # an aborted job's records: never visible to Spark
        junk = [log.append(b"aborted %d" % i) for i in range(1000)]
    stage(spark.range(300, 600, numPartitions=1), log_path)
    before = ids(load(spark, log_path))
    assert before == list(range(600))
    with CommitLog.open(log_path, readonly=True) as log:
        assert log.mark_dead(junk) == len(junk)
        sealed = [s.base_offset for s in log.segments()[:-1]]
        outs = log.compact([[b] for b in sealed], lambda o, k, t, m: "dead" if m else None)
        assert sum(o.dropped.get("dead", 0) for o in outs) == len(junk)
        assert any(o.segment is None for o in outs)  # a segment of junk only: a gap now
        assert sum(o.bytes_after for o in outs) < sum(o.bytes_before for o in outs)
    assert ids(load(spark, log_path)) == before
    assert ids(load(spark, log_path, maxPartitionBytes=2048)) == before  # runs cut at gaps


@pytest.mark.usefixtures("both_readers")
def test_a_stream_restarts_past_an_aborted_jobs_records_compacted_away_before_it(spark, log_path,
                                                                                tmp_path):
    """The group sits where an aborted job's records start; retention removed what the group
    read, a compaction dropped the aborted records' segments: the log now starts after them, and
    the restart reads on (was DataLossError: offsets [group, start) removed by retention)."""
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    stage(spark.range(0, 300, numPartitions=1), log_path, segmentSize=4096)
    _run(_stream(spark, log_path, out, checkpoint))                     # the group read it all
    with CommitLog.open(log_path, roll_after=0.001) as log:            # sealed by time: the
        time.sleep(0.01)                                                # aborted records start
        junk = [log.append(b"aborted 0")]                               # a segment of their own
    with CommitLog.open(log_path) as log:
        junk += [log.append(b"aborted %d" % i) for i in range(1, 1000)]
        group = log.committed()["etl"]
        assert junk[0] == group in [s.base_offset for s in log.segments()]
    stage(spark.range(300, 600, numPartitions=1), log_path)
    with CommitLog.open(log_path, readonly=True) as log:
        while log.segments()[1].base_offset <= group:                   # retention: what was read
            assert log.remove_head().status == "removed"
        assert log.mark_dead(junk) == len(junk)
        sealed = [s.base_offset for s in log.segments()[:-1]]
        log.compact([[b] for b in sealed], lambda o, k, t, m: "dead" if m else None)
        assert log.retention_start_offset == group < log.start_offset
    _run(_stream(spark, log_path, out, checkpoint))
    assert ids(spark.read.parquet(out)) == list(range(600))
    with CommitLog.open(log_path, readonly=True) as log:
        assert log.committed()["etl"] > junk[-1]


def _stream(spark, path: str, out: str, checkpoint: str):
    return (read_stream(spark, path, group="etl").writeStream.format("parquet")
            .option("path", out).option("checkpointLocation", checkpoint)
            .trigger(availableNow=True).start())


def _run(query) -> None:
    await_termination(query, 120)
    if query.exception() is not None:
        raise query.exception()
