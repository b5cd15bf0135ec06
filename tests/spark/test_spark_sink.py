"""The streaming sink: each micro-batch staged once, across a killed and restarted query."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from commitlog.spark import jobs
from commitlog.spark.ledger.ledger import Ledger

from spark_helpers import ids, load, stage

pytestmark = pytest.mark.spark

CHILD = os.path.join(os.path.dirname(__file__), "sink_child.py")


def _sink_query(spark, source: str, sink: str, checkpoint: str, **options):
    reader = spark.readStream.format("commitlog").option("path", source)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return (reader.load().writeStream.format("commitlog").option("path", sink)
            .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())


def _finish(query) -> None:
    query.awaitTermination(180)
    assert not query.isActive
    if query.exception() is not None:
        raise query.exception()


def _sink_batches(sink: str) -> list[int]:
    if not Ledger.exists(sink):
        return []
    with Ledger(sink) as ledger:
        return sorted(j.batch_id for j in ledger.jobs() if j.kind == "stream"
                      and j.state == "committed")


def test_sink_stages_a_stream_and_restarts_add_nothing(spark, tmp_path):
    source, sink, checkpoint = (str(tmp_path / n) for n in ("source", "sink", "checkpoint"))
    stage(spark.range(0, 4000, numPartitions=4), source)
    _finish(_sink_query(spark, source, sink, checkpoint, maxRowsPerTrigger=2000))
    assert ids(load(spark, sink)) == list(range(4000))
    assert _sink_batches(sink) == [0, 1]
    stage(spark.range(4000, 5000, numPartitions=1), source)
    _finish(_sink_query(spark, source, sink, checkpoint, maxRowsPerTrigger=2000))
    _finish(_sink_query(spark, source, sink, checkpoint, maxRowsPerTrigger=2000))
    assert ids(load(spark, sink)) == list(range(5000))
    assert _sink_batches(sink) == [0, 1, 2]


def test_sink_writes_each_micro_batch_once_across_a_killed_query(spark, tmp_path):
    source, sink, checkpoint = (str(tmp_path / n) for n in ("source", "sink", "checkpoint"))
    records = 20
    stage(spark.range(0, records * 100, numPartitions=records), source)   # 40 records
    child = subprocess.Popen([sys.executable, CHILD, source, sink, checkpoint],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while len(_sink_batches(sink)) < 3 and child.poll() is None:
            assert time.monotonic() < deadline, "the child query staged nothing in time"
            time.sleep(0.05)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)     # the child, its JVM and its python workers
        child.wait()
    staged = _sink_batches(sink)
    assert staged and len(staged) < records, "the query finished before it could be killed"
    # The worst moment to die: the sink committed micro-batch N, Spark had not yet recorded it.
    last = staged[-1]
    for name in (str(last), f".{last}.crc"):
        path = os.path.join(checkpoint, "commits", name)
        if os.path.exists(path):
            os.unlink(path)
    assert os.path.exists(os.path.join(checkpoint, "offsets", str(last)))

    # The restart re-runs micro-batch N with its recorded offsets, then reads the rest at once.
    _finish(_sink_query(spark, source, sink, checkpoint))
    assert ids(load(spark, sink)) == list(range(records * 100))   # every row exactly once
    assert _sink_batches(sink) == list(range(last + 2))
    duplicates = [j for j in jobs(sink) if j.reason and "duplicate" in j.reason]
    assert [j.batch_id for j in duplicates] == [last]
    with Ledger(sink) as ledger:
        ledger.resolve_abandoned()                  # the killed run's in-flight writers
        assert ledger.pending_floor() is None


def test_a_duplicate_micro_batch_commit_is_made_dead(tmp_path, spark):
    sink = str(tmp_path / "sink")
    stage(spark.range(0, 1, numPartitions=1), sink)
    with Ledger(sink) as ledger:
        from commitlog.spark.ledger.processes import identify
        outcomes = []
        for writer, offset, job in (("w1", 100, "j1"), ("w2", 200, "j2")):
            # The second run of micro-batch 7 (after a restart) appends again, then commits.
            ledger.register_writer(writer, "sink-run", offset, identify())
            ledger.add_records(writer, [(offset, 5, 64)])
            assert ledger.finish_writer(writer) == (1, 5)
            outcomes.append(ledger.commit_job(job, [(writer, 1, 5)], tasks_job="sink-run",
                                              kind="stream", sink_id="s", batch_id=7))
        first, again = outcomes
        assert (first.state, again.state) == ("committed", "aborted")
        assert [r.offset for r in ledger.visible(100, 300)] == [100]
        assert ledger.dead_offsets(100, 300) == [200]
        assert ledger.sink_batch_committed("s", 7)
