"""Eviction of archived segments by real passes: local retention deletes what the archive's
manifest lists (audited `archived: true`, nothing lost), keeps the rest as `not-archived`,
and trusts only this log's manifest."""

from __future__ import annotations

import json
import time
from dataclasses import replace

from archive_helpers import BUCKET, TcpProxy
from retention_helpers import config_text, make_log, manual_pass, segment_bases, set_age, wait_for, write_config

from commitlog import CommitLog
from commitlog.archive import LogArchive, Manifest, open_tier, upload_sealed
from commitlog.layout import archive_manifest_path
from retention import RetentionScheduler
from retention.audit import read_events


def _archive(tmp_path, url: str, count: int) -> None:
    """Upload the `count` oldest sealed segments of log `staging` to `url` (its copy refreshed)."""
    log_dir = tmp_path / "staging"
    with CommitLog.open(log_dir, readonly=True) as log:
        upload_sealed(LogArchive(open_tier(url), str(log_dir), "staging"), log.segments()[:count],
                      now_ms=int(time.time() * 1000))


def _manual_pass(tmp_path, url: str):
    """One manual pass over log `staging` with an archive at `url`; its result."""
    _, config = write_config(tmp_path, config_text(tmp_path, policy={"archive": {"url": url}}))
    return manual_pass(config)


def test_a_pass_evicts_archived_segments_and_keeps_the_unarchived_ones(tmp_path):
    log_dir = tmp_path / "staging"
    bases = make_log(log_dir, 4)
    set_age(log_dir, bases[:4], 3 * 3600)
    url = f"file://{tmp_path}/archive"
    _archive(tmp_path, url, 2)
    result = _manual_pass(tmp_path, url)
    [log_result] = result.logs
    assert result.deleted == 2 and segment_bases(log_dir) == bases[2:]
    kept = log_result.plan.decisions[2]
    assert "not-archived" in kept.reasons and f"not in the archive {url} yet" in kept.explain()
    deleted = [e for e in read_events(str(tmp_path / "audit.jsonl")) if e["event"] == "deleted"]
    assert [(e["base_offset"], e["archived"]) for e in deleted] == [(bases[0], True), (bases[1], True)]


def test_a_manifest_copy_of_another_log_or_a_stale_segment_end_evicts_nothing(tmp_path):
    log_dir = tmp_path / "staging"
    bases = make_log(log_dir, 3)
    set_age(log_dir, bases[:3], 3 * 3600)
    url = f"file://{tmp_path}/archive"
    _archive(tmp_path, url, 2)
    copy = archive_manifest_path(str(log_dir))
    listed = json.loads(open(copy).read())
    # Another log's manifest copy left in this directory: not this log's truth.
    open(copy, "w").write(json.dumps({**listed, "log": "clicks"}))
    assert _manual_pass(tmp_path, url).deleted == 0
    # A listing that ends before the local segment does (a compaction merged it after the upload).
    short = Manifest.from_json(json.dumps(listed).encode(), copy, "m")
    first = short.segments[0]
    open(copy, "wb").write(replace(short, segments=(replace(first, end_offset=first.end_offset - 1),)).to_json())
    assert _manual_pass(tmp_path, url).deleted == 0
    assert segment_bases(log_dir) == bases


def test_with_the_tier_down_nothing_is_evicted_and_once_it_is_back_archived_segments_go(tmp_path, s3, s3_credentials):
    bases = make_log(tmp_path / "staging", 4)
    set_age(tmp_path / "staging", bases[:4], 3 * 3600)
    proxy = TcpProxy(s3.port)
    proxy.down()
    _, config = write_config(tmp_path, config_text(tmp_path, policy={"archive": {
        "url": f"s3://{BUCKET}/{tmp_path.name}", "endpoint": proxy.endpoint, "region": "us-east-1",
        "interval": "1s", "retry_after": "1s", "max_retry_after": "1s"}}))
    scheduler = RetentionScheduler(config)
    scheduler.start()
    try:
        time.sleep(1.5)                                   # uploads tried and failed
        assert scheduler.clean().deleted == 0 and segment_bases(tmp_path / "staging") == bases
        proxy.up()
        wait_for(lambda: scheduler.status()["archive"]["staging"]["archived_segments"] == 4, "the uploads")
        assert scheduler.clean().deleted == 4 and segment_bases(tmp_path / "staging") == bases[4:]
    finally:
        scheduler.stop()
        proxy.close()
    with CommitLog.open(tmp_path / "staging", readonly=True,
                        archive=open_tier(f"s3://{BUCKET}/{tmp_path.name}", endpoint=s3.endpoint,
                                          region="us-east-1")) as log:
        assert log.start_offset == 0 and [r.offset for r in log.scan()] == list(range(log.end_offset))
