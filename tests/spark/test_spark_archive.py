"""Spark reads across the archive tier, on both readers (the JVM reader, `format("commitlog")`, and
the Python data source): a staging log whose head segments were archived and evicted reads whole
with the `archive` option, batch and stream and through `commitlog.spark.read`; each partition
gives the committed rows in log order, local and archived partitions mixed; partitions the
archive holds prefer no host and run on any (read from the archive alone, no local directory); a
flipped byte in an archived object fails the read naming it; a range retention removed from both
tiers after planning is a DataLossError; an S3 tier is read by the Python data source for both."""

from __future__ import annotations

import json
import os
import re
import time
from itertools import groupby

import pytest
from pyspark.sql.functions import spark_partition_id

import commitlog.spark
from commitlog import CommitLog
from commitlog.archive import LogArchive, groups, open_tier, upload_sealed, versions
from commitlog.spark.jvm.read_planner import plan_json
from commitlog.spark.reading.reader import CommitLogBatchReader, LogPartition, read_partition
from commitlog.spark.schema import arrow_schema
from commitlog.spark.source import stored_schema
from commitlog.spark.source_options import Options

from spark_helpers import ids, load, read_stream, stage

pytestmark = pytest.mark.spark

CORRUPT = (r"ArchiveCorruptError: archive file://\S+ object staging/\d{{20}}\.log: SHA-256 [0-9a-f]{{64}}, "
           r"the manifest's `sha256` says {sha}: another object than archived")


def archive_log(spark, log_path: str, url: str, *, keep: int = 2, **tier) -> list[int]:
    """Stage 6,000 rows in 64 KiB segments, archive every sealed one to `url` and evict all but
    the last `keep`; returns the rows."""
    for first in range(0, 6000, 1000):
        stage(spark.range(first, first + 1000).selectExpr("id", "repeat('x', 40) AS pad"), log_path,
              segmentSize="64KiB")
    with CommitLog.open(log_path, readonly=True) as log:
        sealed = [s for s in log.segments() if not s.active]
        upload_sealed(LogArchive(open_tier(url, **tier), log_path), sealed, now_ms=int(time.time() * 1000))
        for _ in range(len(sealed) - keep):
            log.remove_head()
        assert log.start_offset > 0
    return list(range(6000))


@pytest.fixture
def evicted(spark, tmp_path, log_path):
    """The archived log on a `file://` tier; returns (url, rows)."""
    url = f"file://{tmp_path}/archive"
    return url, archive_log(spark, log_path, url)


def reader_of(df) -> str:
    """Which reader a DataFrame's scan is: "jvm", or "python" (the Python data source or workers)."""
    plan = df._jdf.queryExecution().executedPlan().toString()
    return "python" if "(Python)" in plan or "MapInArrow" in plan else "jvm"


@pytest.mark.usefixtures("both_readers")
def test_the_evicted_head_reads_back_from_a_file_tier(spark, log_path, evicted, both_readers):
    url, rows = evicted
    assert len(ids(load(spark, log_path))) < len(rows)     # the disk alone lost the head
    df = load(spark, log_path, archive=url)
    assert ids(df) == rows
    assert reader_of(df) == ("jvm" if both_readers == "commitlog" else "python")


def test_the_fast_read_reads_the_archive_with_the_jvm_reader(spark, log_path, evicted):
    url, rows = evicted
    df = commitlog.spark.read(spark, log_path, archive=url)
    assert ids(df) == rows and reader_of(df) == "jvm"


@pytest.mark.usefixtures("both_readers")
def test_local_and_archived_partitions_give_the_committed_rows_in_log_order(spark, log_path, evicted):
    url, rows = evicted
    options = Options.parse({"path": log_path, "archive": url, "maxPartitionBytes": "64KiB"})
    schema = arrow_schema(stored_schema(log_path))
    parts = CommitLogBatchReader(options, schema).partitions()
    assert {p.host is None for p in parts} == {True, False}          # both kinds in one read
    expected = [[i for batch in read_partition(options, schema, p) for i in batch.column("id").to_pylist()]
                for p in parts]
    df = load(spark, log_path, archive=url, maxPartitionBytes="64KiB")
    got = df.select("id", spark_partition_id().alias("part")).collect()
    per_part = [[r.id for r in group] for _, group in groupby(got, key=lambda r: r.part)]
    assert per_part == expected and sorted(sum(per_part, [])) == rows


def test_the_jvm_reader_prefers_the_logs_host_for_local_partitions_and_no_host_for_archived(spark, log_path,
                                                                                            evicted):
    url, _ = evicted
    df = spark.read.format("commitlog").option("path", log_path).option("archive", url) \
        .option("maxPartitionBytes", "64KiB").load()
    scan = df._jdf.queryExecution().executedPlan().collectLeaves().apply(0)
    rdd = scan.inputRDD()
    preferred = [rdd.preferredLocations(p).mkString(",") for p in rdd.partitions()]
    parts = CommitLogBatchReader(Options.parse({"path": log_path, "archive": url, "maxPartitionBytes": "64KiB"}),
                                 arrow_schema(stored_schema(log_path))).partitions()
    assert preferred == ["" if p.host is None else p.host for p in parts]
    assert "" in preferred and os.uname().nodename in preferred


@pytest.mark.usefixtures("both_readers")
def test_a_stream_reads_the_evicted_head_from_the_archive(spark, tmp_path, log_path, evicted):
    url, rows = evicted
    query = (read_stream(spark, log_path, archive=url, startingOffset="earliest")
             .writeStream.format("memory").queryName("archived_stream")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    assert sorted(r[0] for r in spark.sql("SELECT id FROM archived_stream").collect()) == rows


@pytest.mark.usefixtures("both_readers")
def test_a_flipped_byte_in_an_archived_object_fails_the_read_naming_it(spark, tmp_path, log_path, evicted):
    url, _ = evicted
    first = tmp_path / "archive" / "staging" / f"{0:020d}.log"
    manifest = LogArchive(open_tier(url), log_path).manifest()
    data = bytearray(first.read_bytes())
    data[len(data) // 2] ^= 0x01
    first.write_bytes(bytes(data))
    with pytest.raises(Exception, match=CORRUPT.format(sha=manifest.segments[0].sha256)):
        load(spark, log_path, archive=url).count()


def _total_retention(log_path: str, url: str) -> int:
    """The archive's total retention removes its first segment (manifest first, then objects), as
    the disk had evicted it: its offsets are gone from both tiers. Returns its end offset."""
    archive = LogArchive(open_tier(url), log_path)
    manifest = archive.manifest()
    gone = manifest.segments[0]
    archive.write_manifest(manifest.without_before(gone.end_offset))
    archive.drop_objects(gone.base_offset)
    return gone.end_offset


@pytest.mark.parametrize("fail", [True, False])
def test_a_range_removed_from_both_tiers_after_planning_is_a_data_loss(spark, log_path, evicted, fail):
    url, rows = evicted
    options = Options.parse({"path": log_path, "archive": url, "failOnDataLoss": str(fail).lower()})
    schema = arrow_schema(stored_schema(log_path))
    first = CommitLogBatchReader(options, schema).partitions()[0]      # planned on the Python reader ...
    df = commitlog.spark.read(spark, log_path, archive=url, failOnDataLoss=str(fail).lower())   # ... the JVM's
    assert reader_of(df) == "jvm"
    lost_to = _total_retention(log_path, url)
    named = re.escape(f"DataLossError: offsets [0, {lost_to}) of commit log {log_path} were removed by retention")
    if fail:
        with pytest.raises(Exception, match=named):
            df.count()
        with pytest.raises(Exception, match=re.escape(f"offsets [0, {lost_to}) of commit log {log_path}")):
            list(read_partition(options, schema, first))
        return
    # Skipped with a warning: the rows both tiers still hold, as a read planned now gives them.
    now = ids(spark.read.format("commitlog_python").option("path", log_path).option("archive", url).load())
    assert len(now) < len(rows) and ids(df) == now
    assert {i for b in read_partition(options, schema, first) for i in b.column("id").to_pylist()} <= set(now)


@pytest.mark.usefixtures("s3_credentials", "both_readers")
def test_an_s3_tier_is_read_by_the_python_data_source_for_both_readers(spark, tmp_path, log_path, s3,
                                                                       both_readers):
    url = f"s3://archive/{both_readers}"       # the server lives for the module: a prefix per test
    rows = archive_log(spark, log_path, url, endpoint=s3.endpoint, region="us-east-1")
    tier = {"archive": url, "archiveEndpoint": s3.endpoint, "archiveRegion": "us-east-1"}
    df = load(spark, log_path, **tier)
    assert ids(df) == rows and reader_of(df) == "python"
    fast = commitlog.spark.read(spark, log_path, **tier)
    assert ids(fast) == rows and reader_of(fast) == "python"
    query = (read_stream(spark, log_path, startingOffset="earliest", **tier)
             .writeStream.format("memory").queryName(f"s3_stream_{both_readers}")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    assert sorted(r[0] for r in spark.sql(f"SELECT id FROM s3_stream_{both_readers}").collect()) == rows


def test_partitions_the_archive_holds_run_on_any_host_without_the_local_directory(spark, tmp_path, log_path,
                                                                                 evicted):
    url, _ = evicted
    options = Options.parse({"path": log_path, "archive": url, "maxPartitionBytes": "64KiB"})
    schema = arrow_schema(stored_schema(log_path))
    parts = CommitLogBatchReader(options, schema).partitions()
    anywhere = [p for p in parts if p.host is None]
    assert anywhere and parts[-1].host is not None        # the unarchived tail stays on this host
    # Another host: the same log name, no directory of it at all.
    elsewhere = Options.parse({"path": str(tmp_path / "elsewhere" / os.path.basename(log_path)), "archive": url})
    got = [row for batch in read_partition(elsewhere, schema, anywhere[0]) for row in batch.column("id").to_pylist()]
    expected = [row for batch in read_partition(options, schema, anywhere[0]) for row in batch.column("id").to_pylist()]
    assert got == expected and len(got) == anywhere[0].rows
    with pytest.raises(Exception, match="host"):
        list(read_partition(options, schema, LogPartition(parts[-1].runs, 0, 0, "another-host")))


def test_the_jvm_reader_reads_archived_partitions_without_the_local_directory(spark, tmp_path, log_path,
                                                                             evicted):
    url, _ = evicted
    options = Options.parse({"path": log_path, "archive": url, "maxPartitionBytes": "64KiB"})
    struct = stored_schema(log_path)
    schema = arrow_schema(struct)
    anywhere = [p for p in CommitLogBatchReader(options, schema).partitions() if p.host is None]
    plan = plan_json(options, anywhere)
    plan["path"] = str(tmp_path / "elsewhere" / "staging")       # no such directory: never opened
    df = (spark.read.format("commitlog").schema(struct).option("path", log_path)
          .option("plan", json.dumps(plan)).load())
    assert ids(df) == sorted(i for p in anywhere for b in read_partition(options, schema, p)
                             for i in b.column("id").to_pylist())


@pytest.mark.usefixtures("both_readers")
def test_a_stream_over_a_cluster_log_reads_its_tier_and_commits_the_group_there(spark, tmp_path):
    # A cluster log (written through the tier, docs/spark-cluster.md) has no local directory: its
    # stream plans from the tier's newest manifest and commits the group on the tier.
    url, path = f"file://{tmp_path}/tier", str(tmp_path / "events")
    commitlog.spark.write(spark.range(10).toDF("id"), path, archive=url)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    query = (read_stream(spark, path, archive=url, group="etl").writeStream.format("parquet")
             .option("path", out).option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    commitlog.spark.await_termination(query, 120)
    assert query.exception() is None
    assert sorted(r.id for r in spark.read.parquet(out).collect()) == list(range(10))
    end = versions.newest(open_tier(url), "events")[1].end_offset
    assert end > 0 and groups.committed(open_tier(url), "events")["etl"].offset == end


def test_a_cluster_log_s_segments_are_read_from_this_host_s_copies(spark, tmp_path):
    # The write kept each staged segment on this host (docs/spark-cluster.md, "Local copies"): with
    # every data object gone from the tier, both readers still read each row from the copies, and
    # without the copies too the read fails naming an object.
    from commitlog.archive import versions
    from commitlog.spark.reading.reader import cluster_partitions
    url, path = f"file://{tmp_path}/tier", str(tmp_path / "local" / "copies")
    commitlog.spark.write(spark.range(0, 20_000, numPartitions=2).selectExpr("id", "cast(id as string) as s"),
                          path, archive=url, segmentSize="64KiB")
    manifest = versions.newest(open_tier(url), "copies")[1]
    assert len(manifest.segments) > 2 and all(s.host for s in manifest.segments)
    for s in manifest.segments:
        os.remove(tmp_path / "tier" / "copies" / s.key)
    df = spark.read.format("commitlog").option("path", path).option("archive", url).load()
    assert ids(df) == list(range(20_000))                          # the JVM reader
    options = Options.parse({"path": path, "archive": url})
    rows = [i for p in cluster_partitions(options) for b in read_partition(options, arrow_schema(df.schema), p)
            for i in b.column("id").to_pylist()]
    assert sorted(rows) == list(range(20_000))                      # the Python reader
    os.remove(os.path.join(path, "cache", manifest.segments[0].key))
    with pytest.raises(Exception, match=re.escape(manifest.segments[0].key)):
        spark.read.format("commitlog").option("path", path).option("archive", url).load().collect()
