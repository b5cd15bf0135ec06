"""Reading by time: startingTimestamp / endingTimestamp on batch reads and streams, from the
timestamps the store stamps each staged record with."""

from __future__ import annotations

import time

import pytest

from commitlog import CommitLog

from spark_helpers import ids, load, read_stream, spark_records, stage

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("both_readers")]


def _three_stagings(spark, path: str) -> list[int]:
    """Rows 0-99, 100-199, 200-299 staged in turn, a few ms apart; the first timestamp of each."""
    firsts = []
    for base in (0, 100, 200):
        before = {o for o, _ in spark_records(path)} if base else set()
        stage(spark.range(base, base + 100, numPartitions=2), path)
        new = sorted({o for o, _ in spark_records(path)} - before)
        with CommitLog.open(path, readonly=True) as log:
            firsts.append(min(log.read(o).timestamp_ms for o in new))
        time.sleep(0.02)
    assert firsts == sorted(set(firsts))
    return firsts


def test_a_batch_read_between_two_times_gets_the_rows_staged_between_them(spark, log_path):
    t0, t1, t2 = _three_stagings(spark, log_path)
    assert ids(load(spark, log_path, startingTimestamp=t1)) == list(range(100, 300))
    assert ids(load(spark, log_path, endingTimestamp=t2)) == list(range(0, 200))
    assert ids(load(spark, log_path, startingTimestamp=t1, endingTimestamp=t2)) == list(range(100, 200))
    assert ids(load(spark, log_path, startingTimestamp=t0 - 10**6)) == list(range(300))
    assert load(spark, log_path, startingTimestamp=t2 + 10**9).count() == 0     # nothing that late


def test_a_stream_starts_at_a_time_and_stops_before_another(spark, log_path, tmp_path):
    _, t1, t2 = _three_stagings(spark, log_path)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    query = (read_stream(spark, log_path, startingTimestamp=t1, endingTimestamp=t2)
             .writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    assert ids(spark.read.parquet(out)) == list(range(100, 200))


def test_a_time_and_an_offset_for_the_same_end_are_refused(spark, log_path):
    stage(spark.range(10), log_path)
    for options, says in (({"startingTimestamp": 1, "startOffset": 0}, '"startingTimestamp" and "startOffset"'),
                          ({"endingTimestamp": 1, "endOffset": 0}, '"endingTimestamp" and "endOffset"'),
                          ({"startingTimestamp": 1, "startingOffset": "earliest"},
                           '"startingTimestamp" and "startingOffset"'),
                          ({"startingTimestamp": 5, "endingTimestamp": 4}, '"endingTimestamp" \\(4\\) is below'),
                          ({"startingTimestamp": "noon"}, '"startingTimestamp" must be an integer')):
        with pytest.raises(Exception, match=says):
            load(spark, log_path, **options).collect()
