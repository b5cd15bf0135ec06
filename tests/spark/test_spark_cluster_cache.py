"""Local copies of a cluster log on the multi-host rig (cluster_rig.py, docs/spark-cluster.md,
"Local copies and where tasks run"): after a cluster write each worker host's own disk holds the
segments its tasks staged, the manifest names the host of each, the JVM reader's partitions prefer
the hosts holding their segments, and a copy damaged (a flipped byte) or deleted on one host is
never an error: every row is still read exactly once, by the JVM reader (a `file://` tier) and by
the Python data source (S3)."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

import commitlog.spark
import commitlog.spark.jvm
from commitlog.archive import open_tier, versions
from commitlog.spark.reading.reader import cluster_partitions
from commitlog.spark.source_options import Options

from archive_helpers import CREDENTIALS
from cluster_app import run_application
from sessions import COMMON_CONF, cluster_conf

pytestmark = pytest.mark.spark

ROWS = 40_000
PARTITIONS = 8
KINDS = ("file", "s3")


@pytest.fixture(autouse=True)
def _driver_credentials(monkeypatch):
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)


def _options(rig, kind: str) -> dict[str, str]:
    if kind == "file":
        return {"archive": rig.shared_url}
    return {"archive": f"s3://{rig.bucket}/cache", "archiveEndpoint": rig.s3_endpoint, "archiveRegion": "us-east-1"}


def _slowly(batches):
    import time
    for batch in batches:
        time.sleep(0.05)               # long enough that one host cannot take every task alone
        yield batch


@pytest.fixture(scope="module")
def written(spark_cluster):
    """One cluster write per tier kind: {kind: (path, options, newest manifest)}."""
    for name, value in CREDENTIALS.items():
        os.environ.setdefault(name, value)
    spark = spark_cluster.session
    out = {}
    for kind in KINDS:
        path = os.path.join(spark_cluster.local_root, f"cached-{kind}")
        options = _options(spark_cluster, kind)
        df = spark.range(0, ROWS, numPartitions=PARTITIONS).selectExpr("id", "cast(id as string) as s")
        commitlog.spark.write(df.mapInArrow(_slowly, "id long, s string"), path, segmentSize="256KiB", **options)
        tier = open_tier(options["archive"], endpoint=options.get("archiveEndpoint"), region="us-east-1")
        out[kind] = (path, options, versions.newest(tier, f"cached-{kind}")[1])
    return out


def _host_files(rig, host: str, path: str) -> set[str]:
    found = rig.run_on(host, ["find", os.path.join(path, "cache"), "-type", "f"], check=False).stdout.split()
    return {os.path.relpath(f, os.path.join(path, "cache")) for f in found}


def _ip(rig, host: str) -> str:
    return rig.hosts[host].ip


@pytest.mark.parametrize("kind", KINDS)
def test_each_host_keeps_what_it_staged_and_the_manifest_names_it(spark_cluster, written, kind):
    path, options, manifest = written[kind]
    hosts = {s.host for s in manifest.segments}
    assert hosts == {_ip(spark_cluster, "host-a"), _ip(spark_cluster, "host-b")}, hosts
    for name in ("host-a", "host-b"):
        mine = {k for s in manifest.segments if s.host == _ip(spark_cluster, name) for k in (s.key, s.index_key)}
        assert _host_files(spark_cluster, name, path) == mine
        marker = json.loads(spark_cluster.run_on(name, ["cat", os.path.join(path, "cluster-cache.json")]).stdout)
        assert marker["url"] == options["archive"] and marker["log"] == f"cached-{kind}"
        assert set(marker) == {"format", "url", "endpoint", "region", "log"}   # never a credential
        assert CREDENTIALS["AWS_SECRET_ACCESS_KEY"] not in json.dumps(marker)
    assert not os.path.exists(path)                          # the driver's host staged nothing


def test_the_jvm_reader_s_partitions_prefer_the_hosts_holding_their_segments(spark_cluster, written):
    path, options, manifest = written["file"]
    spark = spark_cluster.session
    options = {**options, "maxPartitionBytes": "60000"}      # several partitions of a few segments
    planned = cluster_partitions(Options.parse({"path": path, **options}))
    assert len(planned) > 2 and any(len(p.prefer) == 1 for p in planned)
    for part in planned:
        touched = {s.host for s in manifest.segments
                   if any(s.base_offset < end and start < s.end_offset for start, end in part.runs)}
        assert set(part.prefer) == touched and part.prefer
    df = spark.read.format("commitlog").option("path", path).options(**options).load()
    assert commitlog.spark.jvm.installed(spark)             # the JVM reader reads a file:// tier
    rdd = df._jdf.queryExecution().toRdd()
    dag = spark._jsc.sc().dagScheduler()
    preferred = []
    for i in range(rdd.getNumPartitions()):
        locations = dag.getPreferredLocs(rdd, i)
        preferred.append({locations.apply(j).host() for j in range(locations.size())})
    assert preferred == [set(p.prefer) for p in planned]
    assert sorted(r.id for r in df.select("id").collect()) == list(range(ROWS))


def test_tasks_read_their_hosts_copies_with_the_tiers_data_objects_gone(spark_cluster, spark_sessions):
    # Every partition one segment (so one host); the tier keeps only the indexes: a task that ran
    # anywhere but where its segment is kept would fail naming the object.
    spark = spark_cluster.session
    path = os.path.join(spark_cluster.local_root, "served")
    options = {**_options(spark_cluster, "file"), "maxPartitionBytes": "1"}
    df = spark.range(0, ROWS, numPartitions=PARTITIONS).selectExpr("id", "cast(id as string) as s")
    commitlog.spark.write(df.mapInArrow(_slowly, "id long, s string"), path, segmentSize="256KiB", **options)
    manifest = versions.newest(open_tier(options["archive"]), "served")[1]
    planned = cluster_partitions(Options.parse({"path": path, **options}))
    assert len(planned) == len(manifest.segments) and all(len(p.prefer) == 1 for p in planned)
    assert {s.host for s in manifest.segments} == {_ip(spark_cluster, "host-a"), _ip(spark_cluster, "host-b")}
    for segment in manifest.segments:
        os.remove(os.path.join(spark_cluster.shared_dir, "served", segment.key))
    spark_sessions.stop()          # an application whose tasks wait for their preferred host
    try:
        conf = {**COMMON_CONF, **cluster_conf(spark_cluster), "spark.locality.wait": "120s"}
        (read,) = run_application(spark_cluster, {"conf": conf, "reads": [{"path": path, "options": options}]})
    finally:
        spark_sessions.cluster(spark_cluster)
    assert read == {"rows": ROWS, "ids_sum": ROWS * (ROWS - 1) // 2, "distinct": ROWS, "hosts": ["host-a", "host-b"]}


def _flip_byte(rig, host: str, file: str) -> None:
    script = ("import os,sys; f=os.open(sys.argv[1], os.O_RDWR); b=os.pread(f,1,100); "
              "os.pwrite(f, bytes([b[0]^0xFF]), 100); os.close(f)")
    rig.run_on(host, [rig.python, "-c", script, file])


@pytest.mark.parametrize("kind", KINDS)
def test_a_damaged_or_deleted_copy_is_read_from_the_tier_and_every_row_comes_once(spark_cluster, written, kind):
    path, options, manifest = written[kind]
    spark = spark_cluster.session
    for name, how in (("host-a", "flip"), ("host-b", "delete")):
        key = next(s.key for s in manifest.segments if s.host == _ip(spark_cluster, name))
        file = os.path.join(path, "cache", key)
        if how == "flip":
            _flip_byte(spark_cluster, name, file)
        else:
            spark_cluster.run_on(name, ["rm", file])
    df = spark.read.format("commitlog").option("path", path).options(**options).load()
    assert sorted(r.id for r in df.select("id").collect()) == list(range(ROWS))
    again = commitlog.spark.read(spark, path, **options)
    assert sorted(r.id for r in again.select("id").collect()) == list(range(ROWS))


def test_the_python_reader_serves_a_valid_copy_and_never_a_differing_one(tmp_path):
    """The S3 route's reader (no Spark here): a copy passing the whole check is read, one that
    differs is removed and the tier read instead."""
    from commitlog.archive import local_copies
    from commitlog.archive.tiered import ArchivedLog, archive_reader
    from commitlog.spark.cluster import commit as committing
    from commitlog.spark.cluster.staging import stage

    tier = open_tier(f"file://{tmp_path}/tier")
    cache = str(tmp_path / "local" / "events")
    assert local_copies.mark(cache, tier.url, None, None, "events")
    versions.mark_cluster(tier, "events", 0)
    values = [pa.py_buffer(os.urandom(300)).to_pybytes() for _ in range(600)]
    staged = stage(tier, "events", "j", "a", 64 * 1024, ((v, b"k") for v in values), cache)
    committing.commit(tier, "events", "j", staged, lambda s: s or "{}")
    damaged = os.path.join(cache, "cache", staged[0].key)
    with open(damaged, "r+b") as f:
        f.seek(50)
        byte = f.read(1)
        f.seek(50)
        f.write(bytes([byte[0] ^ 0xFF]))
    cached = local_copies.CachedTier(tier, cache, "events")
    with ArchivedLog(archive_reader(cached, None, "events")) as log:
        assert [r.value for r in log.scan(0, len(values))] == values
    assert not os.path.exists(damaged)                                   # removed, the tier read
    assert f"events/{staged[1].key}" in cached.served and f"events/{staged[0].key}" not in cached.served
