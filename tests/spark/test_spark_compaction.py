"""The Spark reader over a compacted log: records outside the committed rows (an aborted job's)
marked dead and compacted away leave gaps inside the planned runs; the same rows read back."""

from __future__ import annotations

from commitlog import CommitLog

from spark_helpers import ids, load, stage


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
