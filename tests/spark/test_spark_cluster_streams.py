"""Streams over cluster logs on the multi-host rig (cluster_rig.py, docs/spark-cluster.md
"Streams"): an `availableNow` stream with a group reads every committed row once with tasks on
both worker hosts, its group's offset is on the tier (the same from a worker host), a new
checkpoint with the same group reads nothing more; a running stream sees a job committed later
whole, in a later batch; and the streaming sink with `archive`, its driver (a process of its own,
cluster_sink_driver.py) SIGKILLed after a micro-batch committed and restarted from its checkpoint,
writes every row exactly once."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pyarrow as pa
import pytest

import commitlog.spark
from commitlog.archive import groups, open_tier, versions

from archive_helpers import CREDENTIALS, DIE_WITH_PARENT
from cluster_rig import PYTHONPATH
from test_spark_cluster import _frame, _ids, _kill_driver, _tier_options

pytestmark = pytest.mark.spark

ROWS = 20_000
TIMEOUT = 240.0


@pytest.fixture(autouse=True)
def _driver_credentials(monkeypatch):
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)


def _tier(options: dict):
    return open_tier(options["archive"], endpoint=options.get("archiveEndpoint"), region="us-east-1")


def _with_reader(batches):
    for batch in batches:
        host = pa.array([socket.gethostname()] * batch.num_rows)
        yield pa.RecordBatch.from_arrays([*batch.columns, host], names=[*batch.schema.names, "reader"])


def _stream(spark, path: str, options: dict, checkpoint: str, batches: list, **trigger):
    """A stream of the cluster log at `path` whose micro-batches' (id, reader host) rows are
    appended to `batches`, one list per batch."""
    df = (spark.readStream.format("commitlog").option("path", path).options(**options)
          .option("maxPartitionBytes", "16KiB").load()
          .mapInArrow(_with_reader, "id long, s string, host string, reader string"))

    def collect(frame, batch_id):
        batches.append([(r.id, r.reader) for r in frame.select("id", "reader").collect()])

    return (df.writeStream.foreachBatch(collect).option("checkpointLocation", checkpoint)
            .trigger(**(trigger or {"availableNow": True})).start())


def _finish(query) -> None:
    assert commitlog.spark.await_termination(query, TIMEOUT)
    if query.exception() is not None:
        raise query.exception()


_GROUP_SCRIPT = """
import json, sys
from commitlog.archive import groups, open_tier
spec = json.loads(sys.argv[1])
tier = open_tier(spec["archive"], endpoint=spec.get("archiveEndpoint"), region="us-east-1")
print(groups.committed(tier, spec["name"])[spec["group"]].offset)
"""


def _group_seen_from(rig, host: str, options: dict, name: str, group: str) -> int:
    env = {**os.environ, **CREDENTIALS, "PYTHONPATH": PYTHONPATH}
    spec = json.dumps({**options, "name": name, "group": group})
    done = rig.run_on(host, [sys.executable, "-c", _GROUP_SCRIPT, spec], env=env)
    return int(done.stdout.strip())


@pytest.mark.parametrize("kind", ["file", "s3"])
def test_a_group_stream_reads_every_row_once_on_both_hosts_and_resumes_from_the_tier(
        spark_cluster, tmp_path, kind):
    spark = spark_cluster.session
    name = f"streamed-{kind}"
    path = os.path.join(spark_cluster.local_root, name)
    options = _tier_options(spark_cluster, kind)
    commitlog.spark.write(_frame(spark, 0, rows=ROWS), path, **options)
    batches: list = []
    _finish(_stream(spark, path, {**options, "group": "etl"}, str(tmp_path / "first"), batches))
    rows = [row for batch in batches for row in batch]
    assert sorted(i for i, _ in rows) == list(range(ROWS))             # every row, once
    assert {reader for _, reader in rows} == {"host-a", "host-b"}      # read on both hosts
    end = versions.newest(_tier(options), name)[1].end_offset
    assert groups.committed(_tier(options), name)["etl"].offset == end     # the group, on the tier
    assert _group_seen_from(spark_cluster, "host-a", options, name, "etl") == end
    again: list = []                                                   # a new checkpoint, the same group
    _finish(_stream(spark, path, {**options, "group": "etl"}, str(tmp_path / "second"), again))
    assert [row for batch in again for row in batch] == []
    assert not os.path.exists(path)                                    # nothing local on the driver


def test_a_running_stream_sees_a_later_job_whole_in_a_later_batch(spark_cluster, tmp_path):
    spark = spark_cluster.session
    path = os.path.join(spark_cluster.local_root, "live")
    options = _tier_options(spark_cluster, "file")
    commitlog.spark.write(_frame(spark, 0, rows=ROWS), path, **options)
    batches: list = []
    query = _stream(spark, path, {**options, "group": "live"}, str(tmp_path / "live"), batches,
                    processingTime="1 second")
    try:
        _await_rows(query, batches, ROWS)
        commitlog.spark.write(_frame(spark, ROWS, rows=ROWS), path, **options)    # while it runs
        _await_rows(query, batches, 2 * ROWS)
    finally:
        query.stop()
    first, second = set(range(ROWS)), set(range(ROWS, 2 * ROWS))
    seen = [{i for i, _ in batch} for batch in list(batches) if batch]
    assert sorted(i for batch in batches for i, _ in batch) == list(range(2 * ROWS))
    for ids in seen:                                                   # never part of a job
        assert ids & first in (set(), first) and ids & second in (set(), second)
    assert seen.index(second) > seen.index(first)                      # in a later batch


def _await_rows(query, batches: list, rows: int) -> None:
    deadline = time.monotonic() + TIMEOUT
    while sum(len(b) for b in list(batches)) < rows:
        assert query.isActive, f"the stream ended: {query.exception()}"
        assert time.monotonic() < deadline, f"{rows} rows not streamed in {TIMEOUT} s"
        time.sleep(0.2)


# -- the sink with archive, its driver killed ---------------------------------------------------

SINK_DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cluster_sink_driver.py")
SINK_ROWS, SINK_RECORDS = 2000, 10


def _start_sink_driver(spec: dict, log_file: str) -> subprocess.Popen:
    env = {**os.environ, **CREDENTIALS, "PYTHONPATH": PYTHONPATH}
    with open(log_file, "ab") as out:
        return subprocess.Popen([*DIE_WITH_PARENT, sys.executable, SINK_DRIVER, json.dumps(spec)],
                                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _sink_batches(tier, name: str) -> list[int]:
    found = versions.newest(tier, name)
    return [int(job.rsplit("-", 1)[1]) for job in found[1].jobs] if found else []


def test_the_sink_with_archive_writes_every_row_once_across_a_killed_driver(spark_cluster, tmp_path):
    spark = spark_cluster.session
    options = _tier_options(spark_cluster, "file")
    tier = _tier(options)
    sink = os.path.join(spark_cluster.local_root, "sunk")
    checkpoint = str(tmp_path / "checkpoint")
    spec = {"source": str(tmp_path / "source"), "sink": sink, "checkpoint": checkpoint,
            "options": options, "rows": SINK_ROWS, "records": SINK_RECORDS}
    log_file = str(tmp_path / "sink-driver.log")
    driver = _start_sink_driver(spec, log_file)
    try:
        deadline = time.monotonic() + TIMEOUT
        while len(_sink_batches(tier, "sunk")) < 2:
            assert driver.poll() is None, _tail(log_file)
            assert time.monotonic() < deadline, f"no two micro-batches committed:\n{_tail(log_file)}"
            time.sleep(0.05)
    finally:
        _kill_driver(driver)
    committed = _sink_batches(tier, "sunk")
    assert len(committed) < SINK_RECORDS, "the query finished before it could be killed"
    # The worst moment to die: the sink committed micro-batch N, Spark had not yet recorded it.
    last = max(committed)
    for entry in (str(last), f".{last}.crc"):
        if os.path.exists(os.path.join(checkpoint, "commits", entry)):
            os.unlink(os.path.join(checkpoint, "commits", entry))
    assert os.path.exists(os.path.join(checkpoint, "offsets", str(last)))
    restarted = _start_sink_driver(spec, log_file)
    try:
        assert restarted.wait(TIMEOUT) == 0, _tail(log_file)
    finally:
        _kill_driver(restarted)
    assert _ids(commitlog.spark.read(spark, sink, **options)) == list(range(SINK_ROWS))
    assert sorted(_sink_batches(tier, "sunk")) == list(range(SINK_RECORDS))   # each batch once
    manifest = versions.newest(tier, "sunk")[1]
    (job,) = [j for j in manifest.jobs if j.endswith(f"-{last}")]
    attempts = {key.split("/")[3] for key in tier.keys(f"sunk/staged/{job}/")}
    listed = {e.key.split("/")[2] for e in manifest.segments if e.key.startswith(f"staged/{job}/")}
    assert len(attempts) > len(listed) >= 1                            # the re-run staged, not listed


def _tail(log_file: str) -> str:
    with open(log_file, errors="replace") as f:
        return f.read()[-4000:]
