"""Progress exact to the batch: a consumer group's committed offset follows what the sink has
committed (Spark's commit log), the last batch of a run included, and is never ahead of it."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time

import pytest

import commitlog.spark
from commitlog import CommitLog
from commitlog.spark import await_termination, progress

from spark_helpers import stage

pytestmark = pytest.mark.spark

CHILD = os.path.join(os.path.dirname(__file__), "progress_child.py")


def _committed(path: str, group: str = "etl") -> int | None:
    with CommitLog.open(path, readonly=True) as log:
        return log.committed().get(group)


def _end(path: str) -> int:
    with CommitLog.open(path, readonly=True) as log:
        return log.end_offset


def _stream(spark, path: str, checkpoint: str, *, trigger=None, **options):
    reader = spark.readStream.format("commitlog").option("path", path)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    writer = reader.load().writeStream.format("noop").option("checkpointLocation", checkpoint)
    return writer.trigger(**(trigger or {"availableNow": True})).start()


def _finish(query) -> None:
    assert await_termination(query, 120)
    if query.exception() is not None:
        raise query.exception()


def _sink_committed(checkpoint: str) -> dict[int, list[dict]]:
    """The batches in the query's commit log, with their sources' end offsets (offset log)."""
    done = {}
    commits = os.path.join(checkpoint, "commits")
    for name in os.listdir(commits) if os.path.isdir(commits) else ():
        if name.isdigit():
            with open(os.path.join(checkpoint, "offsets", name)) as f:
                lines = f.read().splitlines()
            done[int(name)] = [json.loads(line) for line in lines[2:]]
    return done


def test_multi_batch_runs_commit_every_batch_end_never_ahead(spark, log_path, tmp_path):
    checkpoint = str(tmp_path / "checkpoint")
    for base in range(0, 8000, 2000):
        stage(spark.range(base, base + 2000, numPartitions=2), log_path)   # 8 records of 1000
    for run, more in ((1, 0), (2, 4000)):        # twice: a restart with new rows
        if more:
            stage(spark.range(8000, 8000 + more, numPartitions=4), log_path)
        _finish(_stream(spark, log_path, checkpoint, group="etl", maxRowsPerTrigger=2500))
        batches = _sink_committed(checkpoint)
        last = batches[max(batches)][0]["offset"]
        assert last == _end(log_path) == _committed(log_path)   # the last batch of the run too
    assert len(batches) >= 6                                     # 12 records, 2 a batch


def test_single_batch_available_now_runs_commit_their_only_batch(spark, log_path, tmp_path):
    checkpoint = str(tmp_path / "checkpoint")
    for run in range(2):                          # a daily job: one batch a run, twice
        stage(spark.range(run * 1000, run * 1000 + 1000, numPartitions=2), log_path)
        _finish(_stream(spark, log_path, checkpoint, group="etl"))
        batches = _sink_committed(checkpoint)
        assert len(batches) == run + 1
        assert _committed(log_path) == batches[run][0]["offset"] == _end(log_path) == 2 * run + 2


def test_a_running_query_commits_each_batch_within_a_second_never_ahead(spark, log_path, tmp_path):
    checkpoint = str(tmp_path / "checkpoint")
    stage(spark.range(0, 1000, numPartitions=1), log_path)
    query = _stream(spark, log_path, checkpoint, trigger={"processingTime": "200 milliseconds"},
                    group="etl")
    lags, seen = [], set()
    try:
        for base in range(1000, 5000, 1000):
            stage(spark.range(base, base + 1000, numPartitions=1), log_path)
            deadline = time.monotonic() + 60
            target = _end(log_path)
            while time.monotonic() < deadline:
                committed = _committed(log_path)     # read first, then what the sink has
                batches = _sink_committed(checkpoint)
                sink_end = max((b[0]["offset"] for b in batches.values()), default=0)
                assert committed is None or committed <= sink_end, (committed, batches)
                for batch_id, sources in batches.items():
                    if batch_id not in seen and sources[0]["offset"] == target:
                        seen.add(batch_id)
                        appeared = os.path.getmtime(os.path.join(checkpoint, "commits",
                                                                 str(batch_id)))
                        while _committed(log_path) != target:
                            time.sleep(0.01)
                        lags.append(time.time() - appeared)
                if _committed(log_path) == target:
                    break
                time.sleep(0.02)
            assert _committed(log_path) == target
    finally:
        query.stop()
    assert lags and max(lags) < 1.0, lags          # the bound: within a second


def test_a_stopped_query_has_its_last_batch_committed(spark, log_path, tmp_path):
    checkpoint = str(tmp_path / "checkpoint")
    stage(spark.range(0, 3000, numPartitions=3), log_path)
    query = _stream(spark, log_path, checkpoint, trigger={"processingTime": "100 milliseconds"},
                    group="etl", maxRowsPerTrigger=1000)
    deadline = time.monotonic() + 60
    while len(_sink_committed(checkpoint)) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    query.stop()
    await_termination(query, 30)
    batches = _sink_committed(checkpoint)
    assert _committed(log_path) == batches[max(batches)][0]["offset"] == 3


def test_a_driver_killed_between_sink_and_group_commit_is_caught_up_on_restart(
        spark, log_path, tmp_path):
    checkpoint, marker = str(tmp_path / "checkpoint"), str(tmp_path / "listener-reached")
    stage(spark.range(0, 2000, numPartitions=2), log_path)
    child = subprocess.Popen([sys.executable, CHILD, log_path, checkpoint, marker],
                             start_new_session=True, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 180
        while not os.path.exists(marker):
            assert child.poll() is None, child.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "the child's listener was never reached"
            time.sleep(0.05)
        # The listener got the batch's progress: the sink has committed it...
        assert os.path.exists(os.path.join(checkpoint, "commits", "0"))
        with open(marker) as f:
            assert f.read().split() == [log_path, "etl", "2"]
    finally:
        os.killpg(child.pid, signal.SIGKILL)     # the driver and its JVM, mid-listener
        child.wait(30)
        child.stderr.close()
    # ...and the group was not committed past where the query started: behind, never ahead.
    assert _committed(log_path) == 0
    # The restarted query (nothing new to read) catches the group up.
    _finish(_stream(spark, log_path, checkpoint, group="etl"))
    assert _committed(log_path) == 2
    stage(spark.range(2000, 3000, numPartitions=1), log_path)
    _finish(_stream(spark, log_path, checkpoint, group="etl"))
    assert _committed(log_path) == 3


def test_a_checkpoint_with_the_old_offset_format_resumes(spark, log_path, tmp_path):
    checkpoint, out = str(tmp_path / "checkpoint"), str(tmp_path / "out")

    def run():
        _finish(spark.readStream.format("commitlog").option("path", log_path)
                .option("group", "etl").load().writeStream.format("parquet").option("path", out)
                .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())

    stage(spark.range(0, 2000, numPartitions=2), log_path)
    run()
    # Rewrite the checkpoint's offsets as the source wrote them before: {"offset": n} alone.
    offsets = os.path.join(checkpoint, "offsets")
    for name in os.listdir(offsets):
        if name.isdigit():
            with open(os.path.join(offsets, name)) as f:
                lines = f.read().splitlines()
            assert "commitlog" in json.loads(lines[2])
            lines[2:] = [json.dumps({"offset": json.loads(line)["offset"]}) for line in lines[2:]]
            with open(os.path.join(offsets, name), "w") as f:
                f.write("\n".join(lines))
            crc = os.path.join(offsets, f".{name}.crc")
            if os.path.exists(crc):
                os.remove(crc)
    stage(spark.range(2000, 3000, numPartitions=1), log_path)
    run()
    assert sorted(r.id for r in spark.read.parquet(out).collect()) == list(range(3000))
    assert _committed(log_path) == 3


def test_queries_without_a_group_commit_nothing(spark, log_path, tmp_path):
    stage(spark.range(0, 1000, numPartitions=1), log_path)
    query = _stream(spark, log_path, str(tmp_path / "checkpoint"))
    _finish(query)
    assert query.lastProgress["numInputRows"] == 1000 or any(
        p["numInputRows"] == 1000 for p in query.recentProgress)
    with CommitLog.open(log_path, readonly=True) as log:
        assert log.committed() == {}


def test_several_sources_in_one_query_each_commit_their_group(spark, tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    stage(spark.range(0, 1000, numPartitions=1), a)
    stage(spark.range(0, 2000, numPartitions=2), b)
    left = spark.readStream.format("commitlog").option("path", a).option("group", "ga").load()
    right = spark.readStream.format("commitlog").option("path", b).option("group", "gb").load()
    query = (left.union(right).writeStream.format("noop")
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    _finish(query)
    assert (_committed(a, "ga"), _committed(b, "gb")) == (1, 2)


def test_a_failing_listener_does_not_break_the_query(spark, log_path, tmp_path, monkeypatch,
                                                     caplog):
    def broken(path, group, offset):
        raise OSError(f"disk on fire under {path}")

    monkeypatch.setattr(progress, "commit_group", broken)
    stage(spark.range(0, 2000, numPartitions=2), log_path)
    out = str(tmp_path / "out")
    with caplog.at_level(logging.WARNING, logger="commitlog.spark"):
        query = (spark.readStream.format("commitlog").option("path", log_path)
                 .option("group", "etl").option("maxRowsPerTrigger", 1000).load()
                 .writeStream.format("parquet").option("path", out)
                 .option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(availableNow=True).start())
        _finish(query)
    assert spark.read.parquet(out).count() == 2000
    assert any("could not commit offset 2 for consumer group 'etl'" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]
    # The source itself commits a batch's end when it plans the next (here: when the run checks
    # for more), so even without the listener the group is not left behind.
    assert _committed(log_path) == 2


def test_group_offsets_read_only_commitlog_sources_with_a_group():
    event = {"sources": [
        {"endOffset": {"offset": 7, "commitlog": "/logs/a", "group": "etl"}},
        {"endOffset": json.dumps({"offset": 3, "commitlog": "/logs/b", "group": "g2"})},
        {"endOffset": {"offset": 9, "commitlog": "/logs/c"}},          # no group
        {"endOffset": {"offset": 4}},                                 # an old checkpoint's
        {"endOffset": {"topic": {"0": 12}}},                           # another source
        {"endOffset": "not json"},
        {"endOffset": None},
    ]}
    assert progress.group_offsets(json.dumps(event)) == [("/logs/a", "etl", 7, {}),
                                                        ("/logs/b", "g2", 3, {})]
    assert progress.group_offsets(json.dumps({"sources": []})) == []


def test_register_installs_one_listener_per_session(spark):
    first = progress.install(spark)
    assert commitlog.spark.register(spark) and progress.install(spark) is first
