"""Spark reads across the archive tier: a staging log whose head segments were archived and
evicted reads whole through `commitlog.spark.read(..., archive=URL)`, the Python data source's
batch and stream readers with the `archive` option; partitions the archive holds run on any host
(read from the archive alone, no local directory); the JVM reader refuses the option by name."""

from __future__ import annotations

import os
import time

import pytest

import commitlog.spark
from commitlog import CommitLog
from commitlog.archive import LogArchive, open_tier, upload_sealed
from commitlog.spark.reading.reader import CommitLogBatchReader, LogPartition, read_partition
from commitlog.spark.schema import arrow_schema
from commitlog.spark.source import stored_schema
from commitlog.spark.source_options import Options

from spark_helpers import ids, stage

pytestmark = pytest.mark.spark


@pytest.fixture
def evicted(spark, tmp_path, log_path):
    """A log of 6,000 rows in 64 KiB segments, every sealed one archived and all but the last
    two evicted; returns (url, rows)."""
    for first in range(0, 6000, 1000):
        stage(spark.range(first, first + 1000).selectExpr("id", "repeat('x', 40) AS pad"), log_path,
              segmentSize="64KiB")
    url = f"file://{tmp_path}/archive"
    with CommitLog.open(log_path, readonly=True) as log:
        sealed = [s for s in log.segments() if not s.active]
        upload_sealed(LogArchive(open_tier(url), log_path), sealed, now_ms=int(time.time() * 1000))
        for _ in range(len(sealed) - 2):
            log.remove_head()
        assert log.start_offset > 0
    return url, list(range(6000))


def test_the_fast_read_and_the_python_source_read_the_evicted_head_from_the_archive(spark, log_path, evicted):
    url, rows = evicted
    assert len(ids(commitlog.spark.read(spark, log_path))) < len(rows)     # the disk alone lost the head
    assert ids(commitlog.spark.read(spark, log_path, archive=url)) == rows
    df = spark.read.format("commitlog_python").option("path", log_path).option("archive", url).load()
    assert ids(df) == rows


def test_the_jvm_reader_refuses_the_archive_option_by_name(spark, log_path, evicted):
    url, _ = evicted
    with pytest.raises(Exception, match='option "archive": the JVM reader'):
        spark.read.format("commitlog").option("path", log_path).option("archive", url).load().count()


def test_a_stream_reads_the_evicted_head_from_the_archive(spark, tmp_path, log_path, evicted):
    url, rows = evicted
    query = (spark.readStream.format("commitlog_python").option("path", log_path).option("archive", url)
             .option("startingOffset", "earliest").load()
             .writeStream.format("memory").queryName("archived_stream")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert sorted(r[0] for r in spark.sql("SELECT id FROM archived_stream").collect()) == rows


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
