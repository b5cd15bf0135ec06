"""A cluster log's commit through its tier (commitlog.archive.versions, commitlog.spark.cluster),
without Spark: staged segments read back at the offsets a manifest version gives them (entries
naming their objects by `key`, indexes without a base), exactly once per job, racing commits of
several processes each landing whole in one version, and the deadline a commit never passes. On a
directory and on an S3 API (moto's server)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from commitlog.archive import Manifest, open_archive, versions
from commitlog.errors import ArchiveCorruptError
from commitlog.spark.cluster import commit as committing
from commitlog.spark.cluster.staging import stage
from commitlog.spark.staging_errors import ClusterCommitError

ROOT = Path(__file__).resolve().parents[2]
SEGMENT = 64 << 10


def _records(tag: str, count: int, size: int = 3000):
    return [((f"{tag}:{i}:".encode() + b"x" * size), b"k") for i in range(count)]


def _read(tier, name="log") -> list[bytes]:
    with open_archive(tier.url, name, endpoint=getattr(tier, "endpoint", None), region="us-east-1") as log:
        return [r.value for r in log.scan()]


def _keep(stored):
    return stored or '{"type":"struct","fields":[]}'


def _open_kwargs(tier):
    return {"endpoint": getattr(tier, "endpoint", None), "region": "us-east-1"}


def test_staged_segments_read_back_at_the_offsets_their_commit_gives_them(tier):
    first = stage(tier, "log", "job-a", "att-1", SEGMENT, _records("a", 50))
    second = stage(tier, "log", "job-b", "att-1", SEGMENT, _records("b", 7))
    assert len(first) > 1                                    # several segments, each at base 0 locally
    assert all(s.key.startswith("staged/job-a/att-1/") for s in first)
    one = committing.commit(tier, "log", "job-b", second, _keep)     # job b lands first, at 0
    two = committing.commit(tier, "log", "job-a", first, _keep)
    assert (one.first, one.end, two.first, two.end) == (0, 7, 7, 57)
    values = _read(tier)
    assert [v.split(b":")[0] + b":" + v.split(b":")[1] for v in values] == \
        [f"b:{i}".encode() for i in range(7)] + [f"a:{i}".encode() for i in range(50)]
    with open_archive(tier.url, "log", **_open_kwargs(tier)) as log:
        assert log.read(7 + 49).value.startswith(b"a:49:")
    newest = versions.newest(tier, "log")
    assert newest[0] == 2 and newest[1].jobs == ("job-b", "job-a")
    assert json.loads(tier.read("log/manifest.json")) == json.loads(newest[1].to_json())


def test_a_job_committed_twice_is_listed_once(tier):
    staged = stage(tier, "log", "job-a", "att-1", SEGMENT, _records("a", 5))
    committing.commit(tier, "log", "job-a", staged, _keep)
    again = committing.commit(tier, "log", "job-a", staged, _keep)       # a retried commit
    assert again.already
    assert len(_read(tier)) == 5 and versions.versions(tier, "log") == [1]


def test_a_staged_object_that_differs_commits_nothing(tier):
    staged = stage(tier, "log", "job-a", "att-1", SEGMENT, _records("a", 5))
    data = tier.read(f"log/{staged[0].key}")
    tier.put(f"log/{staged[0].key}", __import__("io").BytesIO(data[:-1] + b"!"), len(data))
    with pytest.raises(ClusterCommitError, match="SHA-256"):
        committing.commit(tier, "log", "job-a", staged, _keep)
    assert versions.newest(tier, "log") is None


def test_no_version_is_created_after_the_claims_deadline(tier):
    staged = stage(tier, "log", "job-a", "att-1", SEGMENT, _records("a", 5))
    clock = iter([1000.0, 1000.0, 1000.0 + committing.DEFAULT_COMMIT_TIMEOUT + 1])
    with pytest.raises(ClusterCommitError, match="deadline passed"):
        committing.commit(tier, "log", "job-a", staged, _keep, now=lambda: next(clock))
    assert versions.newest(tier, "log") is None
    claim = json.loads(tier.read("log/jobs/job-a/committing.json"))
    assert claim["deadline_ms"] == int((1000.0 + committing.DEFAULT_COMMIT_TIMEOUT) * 1000)
    # A retried commit of the same job keeps the first claim's deadline: still past, still refused.
    with pytest.raises(ClusterCommitError, match="deadline passed"):
        committing.commit(tier, "log", "job-a", staged, _keep, now=lambda: 1000.0 + 10_000)


def test_an_entry_key_outside_the_logs_folder_is_refused(tier):
    staged = stage(tier, "log", "job-a", "att-1", SEGMENT, _records("a", 3))
    body = json.loads(Manifest("log").with_job("j", [staged[0].at(0, 1)], None).to_json())
    body["segments"][0]["key"] = "../other/00000000000000000000.log"
    data = json.dumps(body).encode()
    tier.create(versions.version_key("log", 1), data)
    with pytest.raises(ArchiveCorruptError, match=r"segments\[0\]\.key"):
        _read(tier)


def test_a_single_hosts_manifest_keeps_its_format():
    assert "key" not in Manifest("log").to_json().decode()
    from commitlog.archive import ArchivedSegment
    entry = ArchivedSegment(0, 1, 10, "0" * 64, 64, "0" * 64, None, 5)
    assert set(json.loads(Manifest("log", 0, (entry,)).to_json())) == {"format", "log", "start_offset", "segments"}
    assert "key" not in json.loads(Manifest("log", 0, (entry,)).to_json())["segments"][0]


RACER = """
import sys
from commitlog.archive import open_tier
from commitlog.spark.cluster import commit as committing
from commitlog.spark.cluster.staging import stage
url, endpoint, me = sys.argv[1], sys.argv[2] or None, sys.argv[3]
tier = open_tier(url, endpoint=endpoint, region="us-east-1")
staged = stage(tier, "log", "job-" + me, "att", 64 << 10,
               [((me + ":" + str(i) + ":").encode() + b"y" * 2000, b"k") for i in range(40)])
sys.stdin.readline()                       # all racers commit together
done = committing.commit(tier, "log", "job-" + me, staged, lambda s: s or "{}")
print(done.first, done.end, flush=True)
"""


def test_racing_commits_of_six_processes_each_land_whole_in_disjoint_offsets(tier):
    endpoint = getattr(tier, "endpoint", None) or ""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    procs = [subprocess.Popen([sys.executable, "-c", RACER, tier.url, endpoint, str(n)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env) for n in range(6)]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list(tier.keys("log/staged/"))) < 6 * 2 * 2:
        time.sleep(0.2)                    # every racer staged (two segments of data and index each)
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    out = [p.communicate(timeout=120)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs), out
    ranges = sorted((int(a), int(b)) for a, b in out)
    assert ranges == [(40 * i, 40 * (i + 1)) for i in range(6)]           # disjoint, contiguous
    values = _read(tier)
    for first, end in ranges:                                           # each job's rows together
        tags = {v.split(b":")[0] for v in values[first:end]}
        assert len(tags) == 1 and [int(v.split(b":")[1]) for v in values[first:end]] == list(range(40))
    assert versions.newest(tier, "log")[0] == 6
