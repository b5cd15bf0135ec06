"""The cluster rig itself (cluster_rig.py): tasks run on both worker hosts, each host has its own
local disk at the same path, every host reaches the shared directory and moto's S3 server, and a
lost host takes its processes and its disk with it."""

from __future__ import annotations

import os
import socket

import pytest

from jvm_helpers import CDS_ARCHIVE, TEST_JVM_OPTIONS

pytestmark = pytest.mark.spark

PARTITIONS = 8


def _run_tasks(rig, task, partitions: int = PARTITIONS) -> list:
    """Run `task(partition_index)` once per partition on the cluster; its results in order."""
    rdd = rig.session.sparkContext.parallelize(range(partitions), partitions)
    return rdd.mapPartitionsWithIndex(lambda index, _: [task(index)]).collect()


def _hostname(_index: int) -> str:
    import time
    time.sleep(0.2)          # long enough that one host cannot take every task alone
    return socket.gethostname()


def test_tasks_run_on_both_hosts(spark_cluster):
    assert set(_run_tasks(spark_cluster, _hostname)) == {"host-a", "host-b"}
    assert socket.gethostname() not in {"host-a", "host-b"}      # the driver is on the main host


def _executor_jvm(_index: int) -> tuple[list[str], bool]:
    """The command line of the JVM above this task's Python worker (its executor), and whether
    it maps the run's class-data archive."""
    import psutil
    jvm = next(p for p in psutil.Process().parents() if p.name() == "java")
    return jvm.cmdline(), _maps_archive(jvm.pid)


def _java_of(pid: int) -> int:
    """The JVM process at `pid` or below it (a launcher may stand between)."""
    import psutil
    proc = psutil.Process(pid)
    return next(p.pid for p in (proc, *proc.children(recursive=True)) if p.name() == "java")


def _maps_archive(pid: int) -> bool:
    with open(f"/proc/{pid}/maps") as maps:
        return any(line.rstrip().endswith(str(CDS_ARCHIVE)) for line in maps)


def test_the_driver_and_every_executor_run_with_the_test_jvm_flags(spark_cluster):
    """jvm_helpers: Spark's default Java options from the run's properties file, beside a
    session's own extraJavaOptions; the run's class-data archive mapped where `make` built it."""
    jvm = spark_cluster.session.sparkContext._jvm
    driver = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    executors = _run_tasks(spark_cluster, _executor_jvm)
    for argv in (driver, *(argv for argv, _ in executors)):
        assert set(TEST_JVM_OPTIONS.split()) <= set(argv), argv
    assert "-Dlog4j2.level=ERROR" in driver, "the session's own extraJavaOptions are kept"
    if CDS_ARCHIVE.is_file():     # `make test` builds it; a JVM that cannot map it runs as before
        stale = f"does not map {CDS_ARCHIVE} (stale after an upgrade? remove it: `make test` dumps it again)"
        assert _maps_archive(jvm.java.lang.ProcessHandle.current().pid()), f"the driver {stale}"
        assert all(mapped for _, mapped in executors), f"an executor {stale}"
        assert _maps_archive(_java_of(spark_cluster.master.pid)), f"the master {stale}"


def test_each_host_has_its_own_local_disk_and_all_share_one_directory(spark_cluster):
    local, shared = spark_cluster.local_root, spark_cluster.shared_dir

    def write(index: int) -> str:
        host = socket.gethostname()
        for root in (local, shared):
            with open(os.path.join(root, f"{host}-{index}"), "w") as f:
                f.write(host)
        return host

    hosts = _run_tasks(spark_cluster, write)
    written = {host: {f"{host}-{i}" for i, h in enumerate(hosts) if h == host} for host in hosts}
    assert set(written) == {"host-a", "host-b"}
    for host, names in written.items():
        seen = spark_cluster.run_on(host, ["ls", "-1", local]).stdout.split()
        assert set(seen) == names                         # its own files, not the other host's
        fstype = spark_cluster.run_on(host, ["findmnt", "-n", "-o", "FSTYPE", "--target", local])
        assert fstype.stdout.strip() == "tmpfs"
        assert spark_cluster.run_on(host, ["hostname"]).stdout.strip() == host
    assert os.listdir(local) == []                        # the main host sees neither
    assert set(os.listdir(shared)) == written["host-a"] | written["host-b"]


def test_executors_reach_the_s3_server(spark_cluster):
    endpoint, bucket = spark_cluster.s3_endpoint, spark_cluster.bucket

    def put_twice(index: int) -> tuple[str, bytes, int]:
        import boto3
        from botocore.exceptions import ClientError
        host = socket.gethostname()
        s3 = boto3.client("s3", endpoint_url=endpoint)          # credentials: the environment
        key = f"smoke/{host}-{index}"
        s3.put_object(Bucket=bucket, Key=key, Body=host.encode(), IfNoneMatch="*")
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        try:
            s3.put_object(Bucket=bucket, Key=key, Body=b"again", IfNoneMatch="*")
            status = 200
        except ClientError as exc:
            status = exc.response["ResponseMetadata"]["HTTPStatusCode"]
        return host, body, status

    results = _run_tasks(spark_cluster, put_twice)
    assert {host for host, _, _ in results} == {"host-a", "host-b"}
    assert all(body == host.encode() and status == 412 for host, body, status in results)


def test_a_lost_host_takes_its_processes_and_disk_and_jobs_go_on(spark_cluster):
    marker = os.path.join(spark_cluster.local_root, "before-the-loss")
    spark_cluster.run_on("host-b", ["touch", marker])
    spark_cluster.kill_host("host-b")
    with pytest.raises(RuntimeError, match="not running"):
        spark_cluster.run_on("host-b", ["true"])
    assert set(_run_tasks(spark_cluster, _hostname)) == {"host-a"}

    spark_cluster.revive_host("host-b")                   # a new, empty host under the old name
    assert spark_cluster.run_on("host-b", ["ls", "-A", spark_cluster.local_root]).stdout == ""
    assert set(_run_tasks(spark_cluster, _hostname)) == {"host-a", "host-b"}

