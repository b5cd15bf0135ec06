"""Cluster writes through the archive tier on the multi-host rig (cluster_rig.py,
docs/spark-cluster.md): tasks on both worker hosts stage their rows on the tier, the driver
commits them in one manifest version, and any host reads back exactly the committed rows, on a
`file://` tier and on S3 (moto); what each crash, race and outage of the durability contract
leaves. A second driver is a process of its own (cluster_driver.py, in local mode: the rig's
session holds the master's every core)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pyarrow as pa
import pytest

import commitlog.spark
from commitlog.archive import open_tier, versions

import cluster_faults
from archive_helpers import CREDENTIALS, DIE_WITH_PARENT, TcpProxy
from cluster_rig import PYTHONPATH
from cluster_app import run_application
from sessions import COMMON_CONF, cluster_conf

pytestmark = pytest.mark.spark

ROWS = 40_000
PARTITIONS = 8


@pytest.fixture(autouse=True)
def _driver_credentials(monkeypatch):
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)


def _tier_options(rig, kind: str) -> dict[str, str]:
    if kind == "file":
        return {"archive": rig.shared_url}
    return {"archive": f"s3://{rig.bucket}/cluster", "archiveEndpoint": rig.s3_endpoint,
            "archiveRegion": "us-east-1"}


def _with_host(batches):
    import time
    for batch in batches:
        time.sleep(0.05)               # long enough that one host cannot take every task alone
        host = pa.array([socket.gethostname()] * batch.num_rows)
        yield pa.RecordBatch.from_arrays([*batch.columns, host], names=[*batch.schema.names, "host"])


def _frame(spark, start: int, rows: int = ROWS, transform=_with_host):
    df = spark.range(start, start + rows, numPartitions=PARTITIONS).selectExpr("id", "cast(id as string) as s")
    return df.mapInArrow(transform, "id long, s string, host string")


def _ids(df) -> list[int]:
    return sorted(r.id for r in df.select("id").collect())


@pytest.mark.parametrize("kind", ["file", "s3"])
def test_both_hosts_write_and_any_reader_reads_every_row_once(spark_cluster, kind):
    spark = spark_cluster.session
    path = os.path.join(spark_cluster.local_root, f"both-{kind}")      # no host holds a log there
    options = _tier_options(spark_cluster, kind)
    commitlog.spark.write(_frame(spark, 0), path, **options)
    (_frame(spark, ROWS).write.format("commitlog").option("path", path).options(**options)
     .mode("append").save())
    fast = commitlog.spark.read(spark, path, **options)
    assert {r.host for r in fast.select("host").distinct().collect()} == {"host-a", "host-b"}
    assert _ids(fast) == list(range(2 * ROWS))
    source = spark.read.format("commitlog").option("path", path).options(**options).load()
    assert _ids(source) == list(range(2 * ROWS))
    assert not os.path.exists(path)                                    # nothing local on the driver
    tier = open_tier(options["archive"], endpoint=options.get("archiveEndpoint"), region="us-east-1")
    version, manifest = versions.newest(tier, f"both-{kind}")
    assert version == 2 and len(manifest.jobs) == 2


def _die_once(marker: str):
    def transform(batches):
        done = 0
        for batch in _with_host(batches):
            yield batch
            done += 1
            if done == 2:
                try:
                    os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                except FileExistsError:
                    continue
                os._exit(9)            # the task's Python worker dies mid-way, on the first attempt only
    return transform


def test_a_task_attempt_dying_midway_leaves_every_row_exactly_once(spark_cluster):
    spark = spark_cluster.session
    path = os.path.join(spark_cluster.local_root, "dying")
    marker = os.path.join(spark_cluster.shared_dir, "dying-marker")
    options = _tier_options(spark_cluster, "file")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "500")
    try:
        commitlog.spark.write(_frame(spark, 0, transform=_die_once(marker)), path, **options)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert os.path.exists(marker)                                      # an attempt did die
    assert _ids(commitlog.spark.read(spark, path, **options)) == list(range(ROWS))


def test_a_new_application_reads_every_committed_row_after_a_host_is_lost(spark_cluster, spark_sessions):
    spark = spark_cluster.session
    reads = []
    for kind in ("file", "s3"):
        path = os.path.join(spark_cluster.local_root, f"lost-{kind}")
        options = _tier_options(spark_cluster, kind)
        commitlog.spark.write(_frame(spark, 0), path, **options)      # tasks on both hosts
        reads.append({"path": path, "options": options})
    spark_sessions.stop()                           # the writing application is over
    spark_cluster.kill_host("host-b")               # its processes and its local disk are gone
    try:
        every = {"rows": ROWS, "ids_sum": ROWS * (ROWS - 1) // 2, "distinct": ROWS, "hosts": ["host-a"]}
        conf = {**COMMON_CONF, **cluster_conf(spark_cluster), "spark.cores.max": "1"}
        assert run_application(spark_cluster, {"conf": conf, "reads": reads}) == [every, every]
    finally:
        spark_cluster.revive_host("host-b")
        spark_sessions.cluster(spark_cluster)


SPECULATION = {"spark.speculation": "true", "spark.speculation.interval": "100ms",
               "spark.speculation.quantile": "0.5", "spark.speculation.multiplier": "1.5",
               "spark.speculation.minTaskRuntime": "1s"}


def test_a_speculative_copy_of_a_task_commits_its_rows_once(spark_cluster, spark_sessions):
    path = os.path.join(spark_cluster.local_root, "speculative")
    marker = os.path.join(spark_cluster.shared_dir, "speculative-attempt-")
    options = _tier_options(spark_cluster, "file")
    spark_sessions.stop()                           # the application below takes every core
    try:
        conf = {**COMMON_CONF, **cluster_conf(spark_cluster), **SPECULATION}
        (read,) = run_application(spark_cluster, {
            "conf": conf, "writes": [{"path": path, "options": options, "rows": 10_000, "partitions": 2,
                                      "marker": marker}],
            "reads": [{"path": path, "options": options}]})
    finally:
        spark_sessions.cluster(spark_cluster)
    with open(f"{marker}1") as f:                   # Spark copied the straggler: attempt 1 ran
        assert f.read() in ("host-a", "host-b")
    assert (read["rows"], read["distinct"], read["ids_sum"]) == (10_000, 10_000, 10_000 * 9_999 // 2)
    manifest = versions.newest(_tier(options), "speculative")[1]
    assert len({entry.key.split("/")[2] for entry in manifest.segments}) == 2     # one attempt a partition


class _FailedTaskWatch(threading.Thread):
    """Puts the proxy back up once a task of the running job has failed (Spark's status tracker)."""

    def __init__(self, spark, proxy: TcpProxy) -> None:
        super().__init__(daemon=True)
        self.tracker, self.proxy = spark.sparkContext.statusTracker(), proxy
        self.failed = threading.Event()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for stage in self.tracker.getActiveStageIds():
                info = self.tracker.getStageInfo(stage)
                if info is not None and info.numFailedTasks > 0:
                    self.proxy.up()
                    self.failed.set()
                    return
            time.sleep(0.05)


def test_uploads_cut_midway_fail_their_tasks_and_the_retries_commit_every_row_once(spark_cluster):
    """A partial outage: every segment upload is cut, while the small requests of a commit pass. A
    task must fail on it, never report what it did not stage (its commit would then fail the job)."""
    spark = spark_cluster.session
    path = os.path.join(spark_cluster.local_root, "partial")
    proxy = TcpProxy(spark_cluster.s3.port)
    options = {**_tier_options(spark_cluster, "s3"), "archiveEndpoint": proxy.endpoint}
    watch = _FailedTaskWatch(spark, proxy)
    try:
        proxy.cut_after(64 * 1024)        # more than a claim, a manifest or a head; less than a segment
        watch.start()
        commitlog.spark.write(_frame(spark, 0), path, **options)
        assert watch.failed.is_set()                                   # a task did fail on the cut
        assert _ids(commitlog.spark.read(spark, path, **options)) == list(range(ROWS))
        version, manifest = versions.newest(_tier(options), "partial")
        assert version == 1 and len(manifest.jobs) == 1
    finally:
        watch.stop.set()
        proxy.close()


def test_an_incompatible_dataframe_fails_before_any_task_stages(spark_cluster):
    spark = spark_cluster.session
    path = os.path.join(spark_cluster.local_root, "schema")
    options = _tier_options(spark_cluster, "file")
    commitlog.spark.write(_frame(spark, 0, rows=100), path, **options)
    with pytest.raises(Exception, match="SchemaMismatchError|cannot append"):
        commitlog.spark.write(spark.range(5).selectExpr("cast(id as string) as id"), path, **options)
    tier = open_tier(options["archive"])
    jobs = {key.split("/")[2] for key in tier.keys("schema/staged/")}
    assert jobs == set(versions.newest(tier, "schema")[1].jobs)        # the first job's objects alone


# -- a second driver, the tier's state ---------------------------------------------------------

DRIVER_TIMEOUT = 240.0
DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cluster_driver.py")


def _start_driver(out_dir, path: str, options: dict, start: int, rows: int = ROWS) -> subprocess.Popen:
    """A second driver process (its own session, local mode) appending ids [start, start+rows)."""
    spec = {"path": path, "options": options, "start": start, "rows": rows,
            "partitions": PARTITIONS}
    out = open(os.path.join(out_dir, f"driver-{start}.log"), "wb")
    env = {**os.environ, **CREDENTIALS, "PYTHONPATH": PYTHONPATH}
    with out:
        return subprocess.Popen([*DIE_WITH_PARENT, sys.executable, DRIVER, json.dumps(spec)],
                                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _driver_log(driver: subprocess.Popen, out_dir) -> str:
    spec = json.loads(driver.args[-1])
    with open(os.path.join(out_dir, f"driver-{spec['start']}.log"), errors="replace") as f:
        return f.read()[-4000:]


def _kill_driver(driver: subprocess.Popen) -> None:
    """SIGKILL the driver's whole process group (its Python, its JVM, its Python workers)."""
    try:
        os.killpg(driver.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    driver.wait(30)
    deadline = time.monotonic() + 30
    while _group_alive(driver.pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def _group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs (a zombie waiting for its reaper does not)."""
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                state, _, group = f.read().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue                 # not a process, or gone meanwhile
        if int(group) == pgid and state not in "ZX":
            return True
    return False


def _job_ranges(manifest) -> dict[str, tuple[int, int]]:
    """Each committed job's offsets [first, end), asserting its segments are contiguous."""
    runs: dict[str, list] = {}
    for entry in manifest.segments:
        runs.setdefault(entry.key.split("/")[1], []).append(entry)
    ranges = {}
    for job, entries in runs.items():
        entries.sort(key=lambda e: e.base_offset)
        for before, after in zip(entries, entries[1:]):
            assert before.end_offset == after.base_offset, f"job {job}'s records are not contiguous"
        ranges[job] = (entries[0].base_offset, entries[-1].end_offset)
    return ranges


def _tier(options: dict):
    return open_tier(options["archive"], endpoint=options.get("archiveEndpoint"), region="us-east-1")


def test_two_drivers_writing_one_log_at_once_both_land_whole(spark_cluster, tmp_path):
    spark = spark_cluster.session
    path = os.path.join(spark_cluster.local_root, "two")
    options = _tier_options(spark_cluster, "s3")
    proxy = TcpProxy(spark_cluster.s3.port)
    # The other driver's commit is held right after it listed the log's (no) manifest versions,
    # about to create version 1; the rig's job then runs whole and creates version 1 first.
    proxy.hold_after(b"/committing.json", b"list-type=2")
    other = _start_driver(tmp_path, path, {**options, "archiveEndpoint": proxy.endpoint},
                          start=ROWS)
    try:
        _await_hold(proxy, other, tmp_path)
        commitlog.spark.write(_frame(spark, 0), path, **options)
        proxy.up()                                   # its create of version 1 is refused: it retries
        assert other.wait(DRIVER_TIMEOUT) == 0, _driver_log(other, tmp_path)
    finally:
        _kill_driver(other)
        proxy.close()
    assert _ids(commitlog.spark.read(spark, path, **options)) == list(range(2 * ROWS))
    version, manifest = versions.newest(_tier(options), "two")
    ranges = _job_ranges(manifest)
    assert version == 2 and set(ranges) == set(manifest.jobs) and len(ranges) == 2
    (a, b), (c, d) = sorted(ranges.values())
    assert (a, c) == (0, b) and d == manifest.end_offset                # disjoint, one after the other
    landed = [_ids(commitlog.spark.read(spark, path, startOffset=first, endOffset=end, **options))
              for first, end in sorted(ranges.values())]
    assert landed == [list(range(ROWS)), list(range(ROWS, 2 * ROWS))]  # the rig's job first


def _await_hold(proxy: TcpProxy, driver: subprocess.Popen, out_dir) -> None:
    deadline = time.monotonic() + DRIVER_TIMEOUT
    while not proxy.held.wait(0.1):
        assert driver.poll() is None, f"the driver ended before its claim:\n{_driver_log(driver, out_dir)}"
        assert time.monotonic() < deadline, f"no claim after {DRIVER_TIMEOUT} s:\n{_driver_log(driver, out_dir)}"


# Where the other driver's requests to the tier stop (TcpProxy.hold_after's patterns), and so
# where it is killed: while its tasks stage (no claim yet), right after its claim (checking the
# staged objects), right after the manifest version that commits it was created.
KILL_POINTS = {"before-claim": (b"/staged/",), "after-claim": (b"/committing.json",),
               "after-version": (b"/committing.json", b"/manifests/00000000000000000002.json")}


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_a_driver_killed_at_each_step_of_its_commit_leaves_its_job_whole_or_invisible(
        spark_cluster, tmp_path, point):
    spark = spark_cluster.session
    name = f"killed-{point}"
    path = os.path.join(spark_cluster.local_root, name)
    options = _tier_options(spark_cluster, "s3")
    commitlog.spark.write(_frame(spark, 0, rows=1000), path, **options)
    tier = _tier(options)
    first = set(versions.newest(tier, name)[1].jobs)
    proxy = TcpProxy(spark_cluster.s3.port)
    proxy.hold_after(*KILL_POINTS[point])
    other = _start_driver(tmp_path, path, {**options, "archiveEndpoint": proxy.endpoint}, start=1000)
    try:
        _await_hold(proxy, other, tmp_path)
        _kill_driver(other)
    finally:
        _kill_driver(other)
        proxy.close()
    version, manifest = versions.newest(tier, name)
    (killed,) = {key.split("/")[2] for key in tier.keys(f"{name}/staged/")} - first
    claimed = tier.size(f"{name}/jobs/{killed}/committing.json") is not None
    assert claimed == (point != "before-claim")
    if point == "after-version":                    # committed: whole, at the offsets after the first job
        assert version == 2 and _ids(commitlog.spark.read(spark, path, **options)) == list(range(1000 + ROWS))
        before = 1000 + ROWS
    else:                                           # invisible; its staged objects are the collector's
        assert version == 1 and killed not in manifest.jobs
        assert list(tier.keys(f"{name}/staged/{killed}/"))
        assert _ids(commitlog.spark.read(spark, path, **options)) == list(range(1000))
        before = 1000
    commitlog.spark.write(_frame(spark, before, rows=1000), path, **options)
    assert _ids(commitlog.spark.read(spark, path, **options)) == list(range(before + 1000))


def _mark_started(marker: str):
    def transform(batches):
        os.close(os.open(marker, os.O_CREAT | os.O_WRONLY))
        yield from _with_host(batches)
    return transform


def _down_once(marker: str, proxy: TcpProxy, stop: threading.Event) -> None:
    while not stop.is_set():
        if os.path.exists(marker):
            proxy.down()
            return
        time.sleep(0.02)


def test_the_tier_down_during_a_job_fails_it_naming_the_tier_and_shows_nothing(spark_cluster):
    spark = spark_cluster.session
    path = os.path.join(spark_cluster.local_root, "down")
    proxy = TcpProxy(spark_cluster.s3.port)
    options = {**_tier_options(spark_cluster, "s3"), "archiveEndpoint": proxy.endpoint}
    marker = os.path.join(spark_cluster.shared_dir, "down-started")
    stop = threading.Event()
    cutter = threading.Thread(target=_down_once, args=(marker, proxy, stop), daemon=True)
    try:
        commitlog.spark.write(_frame(spark, 0, rows=1000), path, **options)
        cutter.start()          # the tier goes down once a task of the next job runs
        with pytest.raises(Exception) as failure:
            commitlog.spark.write(_frame(spark, 1000, transform=_mark_started(marker)), path, **options)
        assert proxy.mode == "down"
        assert re.search(r"ArchiveError: archive s3://archive/cluster object down/", str(failure.value))
        proxy.up()
        assert _ids(commitlog.spark.read(spark, path, **options)) == list(range(1000))
        version, manifest = versions.newest(_tier(options), "down")
        assert version == 1 and len(manifest.jobs) == 1
    finally:
        stop.set()
        proxy.close()


def test_a_write_without_archive_from_other_hosts_names_the_way_out(spark_cluster):
    spark = spark_cluster.session
    path = os.path.join(spark_cluster.local_root, "no-archive")
    with pytest.raises(Exception) as failure:
        commitlog.spark.write(_frame(spark, 0, rows=1000), path)
    message = str(failure.value)
    planned = re.escape(socket.gethostname())
    assert re.search(rf"WrongHostError: commit log {re.escape(path)} is on host '{planned}', where "
                     rf"this write was planned, but this Spark task runs on host 'host-[ab]'", message)
    assert "To write from any host, give the option `archive`" in message
    assert "docs/spark-cluster.md" in message


def test_an_attempt_dying_after_it_staged_is_not_committed(spark_cluster):
    spark = spark_cluster.session
    cluster_faults.register(spark)
    path = os.path.join(spark_cluster.local_root, "staged-dying")
    marker = os.path.join(spark_cluster.shared_dir, "staged-dying-marker")
    options = _tier_options(spark_cluster, "file")
    (_frame(spark, 0).write.format(cluster_faults.NAME).option("path", path).option("marker", marker)
     .options(**options).mode("append").save())
    with open(marker) as f:
        dead = f.read()                                                # the attempt that died
    assert dead
    assert _ids(commitlog.spark.read(spark, path, **options)) == list(range(ROWS))
    tier = _tier(options)
    manifest = versions.newest(tier, "staged-dying")[1]
    (job,) = manifest.jobs
    staged = list(tier.keys(f"staged-dying/staged/{job}/{dead}/"))
    assert staged                                                      # left for the collector
    listed = {key for entry in manifest.segments for key in (entry.key, entry.index_key)}
    assert not any(key.startswith(f"staged/{job}/{dead}/") for key in listed)
