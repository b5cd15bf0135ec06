"""Retention of a cluster log on its tier (docs/spark-cluster.md, "Retention on the tier"): total
retention by the lease owner never takes a group's unconsumed records and lands beside racing
commits; the collector deletes dead staged objects, audited, and nothing listed or still running.
Real directory tiers and moto; cluster logs built with the cluster write's own staging and commit."""

from __future__ import annotations

import threading

import pytest

from commitlog.archive import groups, open_tier, versions
from commitlog.spark.cluster import commit as cluster_commit
from commitlog.spark.cluster.staging import stage
from commitlog.spark.staging_errors import ClusterCommitError
from policies import CollectorLimits, PolicyConfig
from retention.audit import AuditTrail, read_events
from retention.archiving.cluster_retention import drop_expired
from retention.archiving.staged_collector import StagedCollector
from archive_helpers import BUCKET

NAME = "events"
DAY = 86400.0


@pytest.fixture(params=["file", "s3"])
def tier(request, tmp_path, s3_credentials):
    if request.param == "file":
        return open_tier(f"file://{tmp_path}/archive")
    server = request.getfixturevalue("s3")
    return open_tier(f"s3://{BUCKET}/{request.node.name}", endpoint=server.endpoint, region="us-east-1")


def _stage(tier, job: str, attempt: str, n: int = 3):
    return stage(tier, NAME, job, attempt, 4096, [(b"v%d" % i, b"k") for i in range(n)])


def _commit(tier, job: str, staged, now: float = 1000.0):
    versions.mark_cluster(tier, NAME, int(now * 1000))
    return cluster_commit.commit(tier, NAME, job, staged, lambda s: "schema", now=lambda: now)


def _policy(**archive) -> PolicyConfig:
    return PolicyConfig.model_validate({"reserve": "1h", "archive": {"url": "file:///x", **archive}})


def _keys(tier) -> set[str]:
    return {k[len(NAME) + 1:] for k in tier.keys(f"{NAME}/")}


def test_total_retention_drops_expired_head_segments_but_never_a_groups_unconsumed_records(tier):
    for job in ("j1", "j2", "j3"):
        _commit(tier, job, _stage(tier, job, "a0"))             # offsets [0,3) [3,6) [6,9), records at t=now
    groups.commit(tier, NAME, "etl", 3, now_ms=10 ** 13)     # consumed the first job only
    dropped = drop_expired(tier, NAME, _policy(reserve="2h"), now=10 ** 10)
    assert [s.base_offset for s, _ in dropped.segments] == [0]
    version, manifest = versions.newest(tier, NAME)
    assert (version, manifest.start_offset, [s.base_offset for s in manifest.segments]) == (dropped.version, 3, [3, 6])
    assert drop_expired(tier, NAME, _policy(reserve="2h"), now=10 ** 10) is None     # etl protects offset 3 on
    groups.commit(tier, NAME, "etl", 9, now_ms=10 ** 13)
    assert drop_expired(tier, NAME, _policy(reserve="2h"), now=10 ** 10).version == version + 1
    assert versions.newest(tier, NAME)[1].start_offset == 9


def test_a_stale_group_protects_nothing_and_size_retention_keeps_the_newest(tier):
    for job in ("j1", "j2", "j3"):
        _commit(tier, job, _stage(tier, job, "a0"))
    groups.commit(tier, NAME, "old", 0, now_ms=0)               # silent for longer than consumer_ttl
    one = versions.newest(tier, NAME)[1].segments[0].bytes
    dropped = drop_expired(tier, NAME, _policy(retention_bytes=one), now=10 ** 8)
    assert [why for _, why in dropped.segments] == ["total-size", "total-size"]
    assert versions.newest(tier, NAME)[1].start_offset == 6


def test_a_commit_racing_the_retentions_version_both_land(tier):
    _commit(tier, "j1", _stage(tier, "j1", "a0"))
    staged = _stage(tier, "j2", "a0")
    real_create = tier.create
    raced = threading.Event()

    def create(key, data):        # the retention's create of version 2 loses to j2's commit, once
        if key == versions.version_key(NAME, 2) and not raced.is_set():
            raced.set()
            _commit(tier, "j2", staged)
        return real_create(key, data)

    tier.create = create
    dropped = drop_expired(tier, NAME, _policy(reserve="2h"), now=10 ** 10)
    version, manifest = versions.newest(tier, NAME)
    assert raced.is_set() and dropped.version == version == 3
    assert manifest.jobs == ("j1", "j2") and manifest.start_offset == 6 and not manifest.segments


def _collector(tier, tmp_path):
    audit = AuditTrail(str(tmp_path / "audit.jsonl"))
    return StagedCollector(tier, NAME, audit, clock=lambda: 0.0), audit


LIMITS = CollectorLimits(grace=60.0, claim_grace=3600.0, staged_max_age=DAY)


def test_the_collector_deletes_dead_staged_objects_and_nothing_listed_or_running(tier, tmp_path):
    _commit(tier, "committed", _stage(tier, "committed", "a0"))
    _stage(tier, "committed", "dead-attempt")                   # died after staging: never named
    cluster_commit.abort(tier, NAME, "aborted", [])             # its tasks' objects left by a failed delete
    _stage(tier, "aborted", "a0")
    _stage(tier, "killed-driver", "a0")                         # claimed, then its driver was SIGKILLed
    cluster_commit.claim(tier, NAME, "killed-driver", 600.0, lambda: 1000.0)
    _stage(tier, "running", "a0")                               # staged, no claim yet
    collector, audit = _collector(tier, tmp_path)
    owned = lambda: True   # noqa: E731
    assert collector.run(LIMITS, now=1000.0, owned=owned).objects == 0       # first seen: the grace
    done = collector.run(LIMITS, now=1100.0, owned=owned)
    left = _keys(tier)
    assert not any(k.startswith(("staged/committed/dead-attempt/", "staged/aborted/")) for k in left)
    assert "jobs/aborted/aborted.json" not in left                             # nothing of it remains
    assert {k for k in left if k.startswith("staged/committed/a0/")} == \
        {k for s in versions.newest(tier, NAME)[1].segments for k in (s.data_file, s.index_file)}
    assert any(k.startswith("staged/killed-driver/") for k in left)           # its deadline is not long past
    assert any(k.startswith("staged/running/") for k in left)
    assert done.objects == 4 and done.markers == 2       # the aborted job's marker and its fence
    done = collector.run(LIMITS, now=1000.0 + 600 + 3601, owned=owned)        # the claim's deadline long past
    left = _keys(tier)
    assert not any(k.startswith(("staged/killed-driver/", "jobs/killed-driver/")) for k in left)
    assert any(k.startswith("staged/running/") for k in left)
    collector.run(LIMITS, now=1000.0 + DAY + 1, owned=owned)                   # unclaimed for a day: fenced
    assert not any(k.startswith("staged/running/") for k in _keys(tier))
    deleted = [e for e in read_events(audit.path) if e.get("event") == "deleted"]
    because = {(e["segment"].split("/")[1], e["because"]) for e in deleted}
    assert because == {("committed", "attempt-unlisted"), ("aborted", "job-aborted"), ("aborted", "job-done"),
                       ("killed-driver", "claim-expired"), ("killed-driver", "job-done"),
                       ("running", "unclaimed"), ("running", "job-done")}
    assert all(e["bytes"] > 0 and e["archive"] == tier.url and e["path"].endswith(e["segment"]) for e in deleted)


def test_a_fenced_job_cannot_be_committed_by_its_late_driver(tier, tmp_path):
    _commit(tier, "first", _stage(tier, "first", "a0"))
    late = _stage(tier, "late", "a0")
    collector, _ = _collector(tier, tmp_path)
    collector.run(LIMITS, now=0.0, owned=lambda: True)
    collector.run(LIMITS, now=DAY, owned=lambda: True)
    with pytest.raises(Exception, match="deadline passed|missing"):
        cluster_commit.commit(tier, NAME, "late", late, lambda s: "schema", now=lambda: 1000.0)
    assert versions.newest(tier, NAME)[1].jobs == ("first",)


def test_dropped_segments_objects_go_only_once_no_kept_version_lists_them(tier, tmp_path):
    for job in ("j1", "j2"):
        _commit(tier, job, _stage(tier, job, "a0"))
    collector, audit = _collector(tier, tmp_path)
    dropped = drop_expired(tier, NAME, _policy(reserve="2h"), now=10 ** 10)
    for segment, why in dropped.segments:
        collector.dropped.update({segment.data_file: why, segment.index_file: why})
    gone = {k for s, _ in dropped.segments for k in (s.data_file, s.index_file)}
    collector.run(LIMITS, now=5000.0, owned=lambda: True)
    assert gone <= _keys(tier)                                  # an older version still lists them: the grace
    collector.run(LIMITS, now=5059.0, owned=lambda: True)
    assert gone <= _keys(tier)
    done = collector.run(LIMITS, now=5060.0, owned=lambda: True)
    assert not gone & _keys(tier) and done.versions >= 1
    assert [versions.newest(tier, NAME)[0]] == versions.versions(tier, NAME)[-1:]
    deleted = [e for e in read_events(audit.path) if e.get("event") == "deleted"]
    assert {e["segment"] for e in deleted if e["because"] == "total-reserve"} == gone


def test_a_collector_that_lost_the_lease_deletes_nothing(tier, tmp_path):
    cluster_commit.abort(tier, NAME, "aborted", [])
    _stage(tier, "aborted", "a0")
    _commit(tier, "j1", _stage(tier, "j1", "a0"))
    collector, _ = _collector(tier, tmp_path)
    before = _keys(tier)
    collector.run(LIMITS, now=0.0, owned=lambda: False)
    collector.run(LIMITS, now=DAY, owned=lambda: False)
    assert _keys(tier) == before


def test_an_aborted_jobs_run_again_committing_while_the_collector_runs_is_never_deleted(tier, tmp_path):
    # A streaming sink's batch aborted once (its marker stays) and run again under the same job id:
    # its new objects are unlisted for the grace, and its commit lands while the collector runs,
    # between its reading the tier and its deleting (the collector asks owned() right there).
    job = "sink-0123456789abcdef0123456789abcdef-7"
    versions.mark_cluster(tier, NAME, 0)
    cluster_commit.abort(tier, NAME, job, [])
    staged = _stage(tier, job, "b2")
    collector, _ = _collector(tier, tmp_path)
    collector.run(LIMITS, now=1000.0, owned=lambda: True)           # first sees them unlisted
    committed = []

    def owned() -> bool:
        if not committed:
            committed.append(cluster_commit.commit(tier, NAME, job, staged, lambda s: "schema"))
        return True

    collector.run(LIMITS, now=1000.0 + LIMITS.grace + 1, owned=owned)
    assert committed and not committed[0].already
    manifest = versions.newest(tier, NAME)[1]
    assert {s.key for s in manifest.segments} <= _keys(tier)      # every listed object still there


def test_an_aborted_unclaimed_job_is_fenced_before_its_objects_go(tier, tmp_path):
    versions.mark_cluster(tier, NAME, 0)
    cluster_commit.abort(tier, NAME, "gone", [])
    staged = _stage(tier, "gone", "a0")
    collector, _ = _collector(tier, tmp_path)
    collector.run(LIMITS, now=1000.0, owned=lambda: True)
    collector.run(LIMITS, now=1000.0 + LIMITS.grace + 1, owned=lambda: True)
    assert not any(k.startswith("staged/gone/") for k in _keys(tier))
    with pytest.raises(ClusterCommitError):                          # a late driver cannot commit it
        cluster_commit.commit(tier, NAME, "gone", staged, lambda s: "schema")
    assert versions.newest(tier, NAME) is None
