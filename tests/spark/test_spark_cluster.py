"""Cluster writes through the archive tier on the multi-host rig (cluster_rig.py,
docs/spark-cluster.md): tasks on both worker hosts stage their rows on the tier, the driver
commits them in one manifest version, and any host reads back exactly the committed rows, on a
`file://` tier and on S3 (moto)."""

from __future__ import annotations

import os
import socket

import pyarrow as pa
import pytest

import commitlog.spark
from commitlog.archive import open_tier, versions

from archive_helpers import CREDENTIALS

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


def test_rows_committed_before_a_host_is_lost_are_all_read(spark_cluster):
    spark = spark_cluster.session
    path = os.path.join(spark_cluster.local_root, "lost")
    options = _tier_options(spark_cluster, "s3")
    commitlog.spark.write(_frame(spark, 0), path, **options)
    spark_cluster.kill_host("host-b")
    try:
        assert _ids(commitlog.spark.read(spark, path, **options)) == list(range(ROWS))
    finally:
        spark_cluster.revive_host("host-b")


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
