"""The rules of streams over a cluster log, without Spark (reading.cluster_stream, progress,
cluster.cluster_sink): offsets are the newest manifest version's, a job is planned whole or not at
all, the group's commits go to the tier and a new reader starts from them, data loss below the
archive's start, offsets that carry the tier (never a credential), and the sink's job id. On a
directory and on an S3 API (moto's server)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from commitlog.archive import groups, versions
from commitlog.spark import progress
from commitlog.spark.cluster import commit as committing
from commitlog.spark.cluster.cluster_sink import sink_job_id
from commitlog.spark.cluster.staging import stage
from commitlog.spark.reading.cluster_stream import ClusterStreamReader, stream_reader
from commitlog.spark.source_options import Options
from commitlog.spark.staging_errors import DataLossError, OptionError
from commitlog.spark.tier_log import tier_fields, tier_options

SEGMENT = 64 << 10


def _options(tier, tmp_path, **extra) -> Options:
    raw = {"path": str(tmp_path / "local" / "log"), "archive": tier.url, "archiveRegion": "us-east-1"}
    if getattr(tier, "endpoint", None):
        raw["archiveEndpoint"] = tier.endpoint
    return Options.parse({**raw, **extra})


def _commit(tier, job: str, count: int) -> committing.Committed:
    versions.mark_cluster(tier, "log", 0)
    staged = stage(tier, "log", job, "att-1", SEGMENT, [(b"x" * 3000, b"k")] * count)
    return committing.commit(tier, "log", job, staged, lambda s: s or '{"type":"struct","fields":[]}')


def _reader(tier, tmp_path, **extra) -> ClusterStreamReader:
    reader = stream_reader(_options(tier, tmp_path, **extra), pa.schema([]))
    assert isinstance(reader, ClusterStreamReader)
    return reader


def _covered(parts) -> list[int]:
    return [o for p in parts for start, end in p.runs for o in range(start, end)]


def test_offsets_are_the_newest_versions_and_the_group_lives_on_the_tier(tier, tmp_path):
    _commit(tier, "job-a", 50)
    reader = _reader(tier, tmp_path, group="etl")
    start = reader.initialOffset()
    assert start == {"offset": 0, "commitlog": reader.options.path, "group": "etl",
                     **tier_fields(reader.options)}
    stage(tier, "log", "job-b", "att-1", SEGMENT, [(b"y" * 3000, b"k")] * 7)   # staged, not committed
    assert reader.latestOffset(start, None)["offset"] == 50
    assert groups.committed(tier, "log")["etl"].offset == 0       # planning commits the start
    _commit(tier, "job-c", 7)
    end = reader.latestOffset({"offset": 50}, None)                # an old checkpoint's offset reads
    assert end["offset"] == 57
    assert _covered(reader.partitions({"offset": 50}, end)) == list(range(50, 57))
    assert all(p.host is None for p in reader.partitions(start, end))     # any host reads
    reader.commit(end)
    assert groups.committed(tier, "log")["etl"].offset == 57
    assert _reader(tier, tmp_path, group="etl").initialOffset()["offset"] == 57    # a new checkpoint
    assert _reader(tier, tmp_path, group="other").initialOffset()["offset"] == 0
    assert _reader(tier, tmp_path, startingOffset="latest").initialOffset()["offset"] == 57


def test_available_now_pins_the_frontier(tier, tmp_path):
    _commit(tier, "job-a", 5)
    reader = _reader(tier, tmp_path)
    reader.prepareForTriggerAvailableNow()
    _commit(tier, "job-b", 5)
    assert reader.latestOffset({"offset": 0}, None)["offset"] == 5
    assert reader.reportLatestOffset()["offset"] == 10


def test_a_start_below_the_archives_start_is_data_loss(tier, tmp_path):
    _commit(tier, "job-a", 5)
    _commit(tier, "job-b", 5)
    version, manifest = versions.newest(tier, "log")
    assert versions.create_version(tier, "log", version + 1, manifest.without_before(5))  # retention
    with pytest.raises(DataLossError, match=r"offsets \[2, 5\) of commit log .*consumer group 'etl'"):
        _reader(tier, tmp_path, group="etl").latestOffset({"offset": 2}, None)
    skipping = _reader(tier, tmp_path, failOnDataLoss="false")
    assert _covered(skipping.partitions({"offset": 2}, {"offset": 10})) == list(range(5, 10))
    assert skipping.initialOffset()["offset"] == 5


def test_max_rows_per_trigger_is_refused_on_a_cluster_log(tier, tmp_path):
    _commit(tier, "job-a", 1)
    with pytest.raises(OptionError, match="maxRowsPerTrigger.*cluster log"):
        _reader(tier, tmp_path, maxRowsPerTrigger="10")


def test_the_progress_listener_commits_a_cluster_logs_group_on_its_tier(tier, tmp_path):
    _commit(tier, "job-a", 3)
    options = _options(tier, tmp_path)
    end = {"offset": 3, "commitlog": options.path, "group": "etl", **tier_fields(options)}
    event = json.dumps({"sources": [{"endOffset": json.dumps(end)}, {"endOffset": {"offset": 1}}]})
    assert progress.group_offsets(event) == [(options.path, "etl", 3, tier_fields(options))]
    progress.ProgressListener().handle(event)
    assert groups.committed(tier, "log")["etl"].offset == 3


def test_offsets_carry_where_the_tier_is_and_nothing_else(tmp_path):
    options = Options.parse({"path": "/logs/events", "archive": "s3://b/p", "archiveEndpoint": "http://e:9",
                             "archiveRegion": "eu-west-1", "group": "g"})
    fields = tier_fields(options)
    assert fields == {"archive": "s3://b/p", "archiveEndpoint": "http://e:9", "archiveRegion": "eu-west-1"}
    again = tier_options("/logs/events", fields)
    assert (again.archive, again.archive_endpoint, again.archive_region) == \
        (options.archive, options.archive_endpoint, options.archive_region)
    assert tier_fields(Options.parse({"path": "/x"})) == {}


def test_a_sinks_job_id_is_its_identity_and_batch():
    assert sink_job_id("/ck/q1", 7) == sink_job_id("/ck/q1", 7)
    assert len({sink_job_id("/ck/q1", 7), sink_job_id("/ck/q1", 8), sink_job_id("/ck/q2", 7)}) == 3
    assert sink_job_id("/ck/q1", 7).endswith("-7") and "/" not in sink_job_id("/ck/q1", 7)
