"""Each host's sidecar governs its caches of cluster logs: real staged copies (the cluster write's
own staging into a real directory tier), real manifest versions, a real Cleaner's passes and audit.
A configured log whose directory is a cache is governed, not missing; copies go under time, size
and disk pressure (before any local log's data), unlisted ones after the commit deadline; nothing
is ever uploaded."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from retention_helpers import config_text, make_log, segment_bases, write_config

from commitlog import disk_usage
from commitlog.archive import local_copies, open_tier, versions
from commitlog.spark.cluster import commit as committing
from commitlog.spark.cluster.staging import stage
from retention import Cleaner
from retention.archiving.cluster_cache import UNLISTED_MARGIN
from retention.audit import read_events

SEGMENT = 64 * 1024


def _tier_files(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


def _stage_job(tier, cache: str, job: str, records: int = 300, *, commit_at: float | None = None):
    """Stage `records` 500-byte records as one task of `job` kept in `cache`; committed (its entries
    archived at `commit_at`) unless that is None... then left unlisted."""
    staged = stage(tier, "staging", job, "a1", SEGMENT, ((os.urandom(500), b"k") for _ in range(records)), cache)
    if commit_at is not None:
        committing.commit(tier, "staging", job, staged, lambda stored: stored or "{}", now=lambda: commit_at)
    return staged


def _cache(tmp_path, where: Path | None = None) -> tuple[object, str, Path]:
    root = tmp_path / "tier"
    tier = open_tier(f"file://{root}")
    cache = str((where or tmp_path) / "staging")
    assert local_copies.mark(cache, tier.url, None, None, "staging")
    versions.mark_cluster(tier, "staging", int(time.time() * 1000))
    return tier, cache, root


def _copies(cache: str) -> set[str]:
    base = Path(cache) / "cache"
    return {str(p.relative_to(base)) for p in base.rglob("*") if p.is_file()}


def _pass(tmp_path, cache: str, *, manual: bool = False, policy: dict | None = None, logs: dict | None = None):
    _, config = write_config(tmp_path, config_text(tmp_path, log={"path": cache}, policy=policy, logs=logs))
    cleaner = Cleaner(config)
    try:
        if manual:
            cleaner.trigger_manual()
        return cleaner.run_pass()
    finally:
        cleaner.close()


def _evictions(tmp_path) -> list[dict]:
    return [e for e in read_events(str(tmp_path / "audit.jsonl")) if e.get("copy") and e["event"] == "deleted"]


def test_expired_copies_go_fresh_ones_stay_and_the_cache_is_no_missing_log(tmp_path):
    tier, cache, root = _cache(tmp_path)
    old = _stage_job(tier, cache, "old", commit_at=time.time() - 3 * 3600)
    new = _stage_job(tier, cache, "new", commit_at=time.time())
    assert len(old) > 1 and all(s.host for s in old)
    before = _tier_files(root)
    result = _pass(tmp_path, cache, manual=True)
    [r] = result.logs
    assert r.cache["evicted"] == 2 * len(old) and not r.not_created and r.error is None
    assert r.to_json_dict(executed=True)["cache"]["evicted"] == 2 * len(old)
    assert _copies(cache) == {k for s in new for k in (s.key, s.index_key)}
    lines = _evictions(tmp_path)
    assert sorted(e["segment"] for e in lines) == sorted(k for s in old for k in (s.key, s.index_key))
    assert all(e["because"] == "expired" and e["archived"] and e["triggers"] == ["manual"] and
               e["archive"] == tier.url for e in lines)
    intents = [e for e in read_events(str(tmp_path / "audit.jsonl")) if e["event"] == "intent"]
    assert {e["action"] for e in intents} == {"evict-copy"} and len(intents) == len(lines)
    assert _tier_files(root) == before                      # nothing uploaded, nothing touched


def test_without_a_trigger_nothing_expired_goes_but_the_size_cap_does(tmp_path):
    tier, cache, _ = _cache(tmp_path)
    first = _stage_job(tier, cache, "first", commit_at=time.time() - 3 * 3600)
    second = _stage_job(tier, cache, "second", commit_at=time.time() - 60)
    assert _pass(tmp_path, cache).logs[0].cache["evicted"] == 0        # no delete hour, no pressure
    keep = sum(os.stat(os.path.join(cache, "cache", k)).st_blocks * 512 for s in second
               for k in (s.key, s.index_key))
    r = _pass(tmp_path, cache, policy={"retention_bytes": keep}).logs[0]
    assert r.cache["evicted"] == 2 * len(first)
    assert _copies(cache) == {k for s in second for k in (s.key, s.index_key)}
    assert {e["because"] for e in _evictions(tmp_path)} == {"size-cap"}


def test_unlisted_copies_and_private_logs_go_once_past_the_commit_deadline(tmp_path):
    tier, cache, _ = _cache(tmp_path)
    stale = _stage_job(tier, cache, "never-committed")
    fresh = _stage_job(tier, cache, "committing-now")
    workspace = local_copies.workspace(cache, "staged/dead-job/a9")
    Path(workspace, "x.log").write_bytes(b"y" * 5000)
    past = time.time() - committing.DEFAULT_COMMIT_TIMEOUT - UNLISTED_MARGIN - 60
    for k in (k for s in stale for k in (s.key, s.index_key)):
        os.utime(os.path.join(cache, "cache", k), (past, past))
    os.utime(os.path.join(workspace, "x.log"), (past, past))
    r = _pass(tmp_path, cache).logs[0]
    assert r.cache["evicted"] == 2 * len(stale) + 1
    assert _copies(cache) == {k for s in fresh for k in (s.key, s.index_key)} and not os.path.exists(workspace)
    assert {e["because"] for e in _evictions(tmp_path)} == {"unlisted"}


@pytest.mark.parametrize("small_fs", [("tmpfs", 16 << 20)], indirect=True)
def test_under_disk_pressure_copies_go_before_a_local_log_s_data(tmp_path, small_fs):
    fs = Path(small_fs)
    tier, cache, root = _cache(tmp_path, fs)
    jobs = [_stage_job(tier, cache, f"job{i}", records=4000, commit_at=time.time() - 600 + i) for i in range(5)]
    bases = make_log(fs / "local", 8)                       # young, unarchived: pressure alone decides
    used = disk_usage(str(fs)).used_ratio
    assert used > 0.55, used
    disk = {"clean_ratio": 0.5, "force_ratio": 0.9, "refuse_writes_ratio": 0.95}
    logs = {"staging": {"path": cache}, "local": {"path": str(fs / "local"), "segment_size": "4KiB"}}
    result = _pass(tmp_path, cache, policy={"disk": disk}, logs=logs)
    by_name = {r.name: r for r in result.logs}
    assert 0 < by_name["staging"].cache["evicted"] < by_name["staging"].cache["copies"]
    assert segment_bases(fs / "local") == bases
    assert disk_usage(str(fs)).used_ratio <= 0.5 + 0.02
    lines = _evictions(tmp_path)
    assert {e["because"] for e in lines} == {"disk-clean"}
    order = {k: i for i, job in enumerate(jobs) for s in job for k in (s.key, s.index_key)}
    evicted = [order[e["segment"]] for e in lines]
    assert evicted == sorted(evicted) and evicted[0] == 0      # the oldest job's copies first


def _victim(tmp_path) -> Path:
    victim = tmp_path / "victim"
    (victim / "sub.tmp").mkdir(parents=True)
    for name in ("precious.db", "sub.tmp/x"):
        (victim / name).write_text("the victim's")
        os.utime(victim / name, (time.time() - 7200, time.time() - 7200))   # as old as an unlisted copy
    return victim


def test_a_link_planted_at_the_cache_folder_is_never_walked_nor_emptied(tmp_path):
    from datetime import datetime, timezone

    from policies import PolicyConfig
    from retention.archiving.cluster_cache import CopyEviction
    from retention.audit import AuditTrail
    _, cache, _ = _cache(tmp_path)
    victim = _victim(tmp_path)
    os.rmdir(os.path.join(cache, "cache"))
    os.symlink(victim, os.path.join(cache, "cache"))
    done = CopyEviction(AuditTrail(str(tmp_path / "audit.jsonl")), time.time, unlisted_after=0).run(
        "staging", cache, PolicyConfig(), datetime.now(timezone.utc))
    assert done["evicted"] == 0 and "unsafe log file" in done["error"]
    assert sorted(str(p.relative_to(victim)) for p in victim.rglob("*")) == ["precious.db", "sub.tmp", "sub.tmp/x"]


def test_a_folder_swapped_for_a_link_after_the_listing_stops_the_removal(tmp_path):
    from retention.archiving.cluster_cache import _remove_below
    victim = _victim(tmp_path)
    root = tmp_path / "cache"
    (root / "staged").mkdir(parents=True)
    os.symlink(victim, root / "staged" / "job")          # was a folder of copies when listed
    for key, tree in (("staged/job/precious.db", False), ("staged/job/sub.tmp", True)):
        with pytest.raises(OSError):
            _remove_below(str(root), key, tree)
    assert (victim / "precious.db").exists() and (victim / "sub.tmp" / "x").exists()


def test_a_marker_that_is_a_link_is_no_cache(tmp_path):
    from retention.archiving.cluster_cache import is_cache
    _, cache, _ = _cache(tmp_path)
    real = tmp_path / "elsewhere.json"
    os.replace(os.path.join(cache, "cluster-cache.json"), real)
    os.symlink(real, os.path.join(cache, "cluster-cache.json"))
    assert not is_cache(cache)
