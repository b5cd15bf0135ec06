"""Uploads to the archive tier in the scheduler: every sealed segment archived once, audited with
an intent and its outcome, retried with backoff while the tier is down (the lag reported, a
health problem past lag_unhealthy), resumed when it returns, settled after a crash, and one log's
hung tier never holding another log's uploads. Real logs, a real S3 API server (moto) behind a
real TCP proxy the tests fail, and a directory tier."""

from __future__ import annotations

import subprocess
import threading
import time

import pytest
from archive_helpers import BUCKET, S3Server, TcpProxy
from retention_helpers import config_text, make_log, manual_pass, segment_bases, set_age, wait_for, write_config

from commitlog.archive import LogArchive, open_tier, upload_sealed
from commitlog.archive.identity import read_state
from commitlog.archive.upload import ManifestWriter
from commitlog import CommitLog
from retention import RetentionScheduler
from retention.archiving import Archiver
from retention.archiving.archive_metrics import ArchiveMetrics
from retention.audit import AuditTrail, read_events
from retention.deletion.watched import WatchedLog
from prometheus_client import CollectorRegistry


def archived_bases(url: str, log: str, **tier_args) -> list[int]:
    manifest = LogArchive(open_tier(url, **tier_args), f"/nonexistent/{log}", log).manifest()
    return [s.base_offset for s in manifest.segments]


def test_the_scheduler_archives_every_sealed_segment_once_with_an_intent_and_its_outcome(tmp_path):
    bases = make_log(tmp_path / "staging", 3)
    url = f"file://{tmp_path}/archive"
    _, config = write_config(tmp_path, config_text(tmp_path, policy={"archive": {"url": url, "interval": "1h"}}))
    with RetentionScheduler(config) as scheduler:
        wait_for(lambda: archived_bases(url, "staging") == bases[:3], what="three segments archived")
        wait_for(lambda: scheduler.status()["archive"]["staging"]["archived_segments"] == 3, what="status")
        status = scheduler.status()["archive"]["staging"]
        exposition = scheduler.metrics.exposition().decode()
    assert (status["url"], status["lag_bytes"], status["lag_seconds"], status["failures"]) == (url, 0, 0.0, 0)
    assert 'retention_archive_uploaded_segments_total{log="staging"} 3.0' in exposition
    events = read_events(str(tmp_path / "audit.jsonl"))
    intents = {e["id"]: e for e in events if e.get("event") == "intent" and e.get("action") == "archive"}
    outcomes = [e for e in events if e.get("event") == "archived"]
    assert sorted(e["base_offset"] for e in intents.values()) == bases[:3]
    assert sorted(e["id"] for e in outcomes) == sorted(intents)
    assert all(len(e["sha256"]) == 64 and e["key"] == f"staging/{e['segment']}" for e in outcomes)


@pytest.fixture
def proxy(s3):
    proxy = TcpProxy(s3.port)
    yield proxy
    proxy.close()


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def _archiver(tmp_path, clock, archive: dict):
    _, config = write_config(tmp_path, config_text(tmp_path, policy={"archive": archive}))
    archiver = Archiver(ArchiveMetrics(CollectorRegistry()), clock=clock)
    audit = AuditTrail(str(tmp_path / "audit.jsonl"))
    archiver.sync(config, audit)
    return archiver


def test_a_tier_that_is_down_is_retried_with_backoff_reported_as_lag_and_caught_up_when_back(
        tmp_path, proxy, s3_credentials):
    bases = make_log(tmp_path / "staging", 2)
    set_age(tmp_path / "staging", bases[:2], 2 * 3600)
    clock = Clock()
    url = f"s3://{BUCKET}/{tmp_path.name}"
    archiver = _archiver(tmp_path, clock, {"url": url, "endpoint": proxy.endpoint, "region": "us-east-1",
                                           "retry_after": "10s", "max_retry_after": "15s",
                                           "lag_unhealthy": "1h"})
    proxy.down()
    try:
        assert archiver.upload("staging") == 0
        first = archiver.status()["staging"]
        assert first["failures"] == 1 and "staging/tier-identity.json" in first["last_error"]
        with CommitLog.open(tmp_path / "staging", readonly=True) as log:
            sealed_bytes = sum(s.used_bytes for s in log.segments()[:2])
        assert first["lag_seconds"] > 7000 and first["lag_bytes"] == sealed_bytes
        [(log, message)] = archiver.problems()
        assert log == "staging" and "lag_unhealthy 3600s" in message and url in message

        clock.now += 5                       # within retry_after: the tier is not asked
        assert archiver.upload("staging") == 0 and archiver.status()["staging"]["failures"] == 1
        clock.now += 6
        archiver.upload("staging")           # asked again, fails again: the wait doubles, capped at 15s
        assert archiver.status()["staging"]["failures"] == 2
        assert archiver._uploaders["staging"].state.next_try_at == pytest.approx(clock.now + 15)

        proxy.up()
        clock.now += 16
        assert archiver.upload("staging") == 2
        after = archiver.status()["staging"]
        assert (after["failures"], after["last_error"], after["lag_bytes"], after["lag_seconds"]) == (0, None, 0, 0.0)
        assert archiver.problems() == []
        assert archived_bases(url, "staging", endpoint=proxy.endpoint, region="us-east-1") == bases[:2]
    finally:
        archiver.close()


def test_the_scheduler_reports_a_tier_down_as_the_health_problem_archive_lagging(tmp_path, proxy, s3_credentials):
    bases = make_log(tmp_path / "staging", 2)
    set_age(tmp_path / "staging", bases[:2], 120)
    proxy.down()
    _, config = write_config(tmp_path, config_text(tmp_path, policy={"archive": {
        "url": f"s3://{BUCKET}/{tmp_path.name}", "endpoint": proxy.endpoint, "region": "us-east-1",
        "lag_unhealthy": "1m"}}))
    with RetentionScheduler(config) as scheduler:
        wait_for(lambda: any(p.startswith("archive-lagging: log staging") for p in scheduler.health()[1]),
                 what="the archive-lagging problem")
        assert 'retention_health_problems{problem="archive-lagging"} 1.0' in scheduler.metrics.exposition().decode()


def test_a_hung_tier_of_one_log_does_not_hold_another_logs_uploads(tmp_path, proxy, s3_credentials):
    for name in ("stuck", "fine"):
        make_log(tmp_path / name, 3)
    proxy.hang()
    logs = {"stuck": {"path": str(tmp_path / "stuck"), "segment_size": "4KiB", "overrides": {"archive": {
                "url": f"s3://{BUCKET}/{tmp_path.name}", "endpoint": proxy.endpoint, "region": "us-east-1"}}},
            "fine": {"path": str(tmp_path / "fine"), "segment_size": "4KiB", "overrides": {"archive": {
                "url": f"file://{tmp_path}/archive"}}}}
    _, config = write_config(tmp_path, config_text(tmp_path, logs=logs))
    scheduler = RetentionScheduler(config)
    scheduler.start()
    try:
        wait_for(lambda: len(archived_bases(f"file://{tmp_path}/archive", "fine")) == 3, timeout=20,
                 what="the healthy log's segments archived")
        assert scheduler.status()["archive"]["stuck"]["archived_segments"] == 0
    finally:
        proxy.up()       # the hung request is cut and fails; stop() then returns
        scheduler.stop()


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


@pytest.mark.parametrize("listed", [True, False], ids=["listed", "not-listed"])
def test_an_upload_its_process_died_in_is_settled_from_the_manifest_and_sent_again_if_unlisted(tmp_path, listed):
    bases = make_log(tmp_path / "staging", 2)
    url = f"file://{tmp_path}/archive"
    if listed:
        with CommitLog.open(tmp_path / "staging", readonly=True) as log:
            upload_sealed(LogArchive(open_tier(url), str(tmp_path / "staging"), "staging"), log.segments()[:1],
                          now_ms=int(time.time() * 1000))
    audit = AuditTrail(str(tmp_path / "audit.jsonl"))
    segment = tmp_path / "staging" / f"{bases[0]:020d}.log"
    audit.append({"event": "intent", "id": "dead0001", "action": "archive", "time": "t", "log": "staging",
                  "path": str(segment), "segment": segment.name, "base_offset": bases[0],
                  "end_offset": bases[1], "bytes": 1, "url": url, "key": f"staging/{segment.name}",
                  "pid": _dead_pid(), "pid_start": 1.0}, sync=True)
    archiver = _archiver(tmp_path, Clock(), {"url": url})
    try:
        archiver.upload("staging")
    finally:
        archiver.close()
    events = read_events(str(tmp_path / "audit.jsonl"))
    [settled] = [e for e in events if e.get("id") == "dead0001" and e["event"] != "intent"]
    assert settled["recovered"] is True
    assert (settled["event"], settled.get("reason")) == (("archived", None) if listed else ("aborted", "not-archived"))
    resent = [e for e in events if e.get("event") == "archived" and e["id"] != "dead0001"]
    assert [e["base_offset"] for e in resent] == (bases[1:2] if listed else bases[:2])
    assert archived_bases(url, "staging") == bases[:2]


def test_total_retention_deletes_from_the_archive_what_the_disk_let_go_except_what_a_group_needs(tmp_path):
    bases = make_log(tmp_path / "staging", 4)
    url = f"file://{tmp_path}/archive"
    clock = Clock()
    archiver = _archiver(tmp_path, clock, {"url": url, "reserve": "2h"})
    try:
        assert archiver.upload("staging") == 4
        with CommitLog.open(tmp_path / "staging", readonly=True) as log:
            for _ in range(3):
                log.remove_head()                  # evicted locally
            log.commit("etl", bases[1] + 1)        # etl still needs the second segment
        archiver.upload("staging")                 # nothing is 2 hours old yet
        assert archived_bases(url, "staging") == bases[:4]
        clock.now += 3 * 3600
        archiver.upload("staging")
    finally:
        archiver.close()
    assert archived_bases(url, "staging") == bases[1:4]
    assert not (tmp_path / "archive" / "staging" / f"{bases[0]:020d}.log").exists()
    assert not (tmp_path / "archive" / "staging" / f"{bases[0]:020d}.index").exists()
    events = read_events(str(tmp_path / "audit.jsonl"))
    intents = [e for e in events if e.get("action") == "archive-delete"]
    deleted = [e for e in events if e["event"] == "deleted"]
    assert [(e["base_offset"], e["because"], e["archive"]) for e in deleted] == [(bases[0], "total-reserve", url)]
    assert [e["id"] for e in intents] == [e["id"] for e in deleted]


def test_an_archive_deletion_its_process_died_in_is_finished_from_the_manifest(tmp_path):
    bases = make_log(tmp_path / "staging", 2)
    url = f"file://{tmp_path}/archive"
    archiver = _archiver(tmp_path, Clock(), {"url": url})
    try:
        archiver.upload("staging")
        archive = archiver._uploaders["staging"].archive
        archive.write_manifest(archive.manifest().without_before(bases[1]))   # killed right after this
        segment = f"{bases[0]:020d}.log"
        audit = AuditTrail(str(tmp_path / "audit.jsonl"))
        audit.append({"event": "intent", "id": "dead0002", "action": "archive-delete", "time": "t",
                      "log": "staging", "path": f"{url}/staging/{segment}", "segment": segment,
                      "base_offset": bases[0], "end_offset": bases[1], "bytes": 1, "archive": url,
                      "because": "total-reserve", "pid": _dead_pid(), "pid_start": 1.0}, sync=True)
        archiver.upload("staging")
    finally:
        archiver.close()
    assert not (tmp_path / "archive" / "staging" / segment).exists()
    [settled] = [e for e in read_events(str(tmp_path / "audit.jsonl")) if e.get("id") == "dead0002"
                 and e["event"] != "intent"]
    assert (settled["event"], settled["recovered"], settled["because"]) == ("deleted", True, "total-reserve")


def test_a_segment_a_compaction_replaced_since_the_listing_is_sent_as_it_is_now(tmp_path):
    make_log(tmp_path / "staging", 2)
    archiver = _archiver(tmp_path, Clock(), {"url": f"file://{tmp_path}/archive"})
    uploader = archiver._uploaders["staging"]
    try:
        stale = uploader._listing()[0]
        with CommitLog.open(tmp_path / "staging") as log:
            log.mark_dead(range(stale.base_offset, stale.base_offset + 20))
            log.compact([[stale.base_offset]], lambda offset, key, tombstone, marked: "dead" if marked else None)
        writer = ManifestWriter(uploader.archive, uploader.archive.manifest())
        [sent] = uploader._listed(uploader._upload(stale, writer) + uploader._flush(writer))
        assert sent.base_offset == stale.base_offset and sent.used_bytes < stale.used_bytes
    finally:
        archiver.close()
    listed = uploader.archive.manifest().segments[0]
    assert listed.bytes < stale.used_bytes and listed.end_offset == stale.end_offset
    events = [e for e in read_events(str(tmp_path / "audit.jsonl")) if e["event"] != "intent"]
    assert [(e["event"], e.get("reason")) for e in events] == [("aborted", "not-archived"), ("archived", None)]


def test_a_tier_that_cannot_be_opened_is_each_runs_error_not_the_schedulers(tmp_path):
    make_log(tmp_path / "staging", 1)
    _, config = write_config(tmp_path, config_text(tmp_path, policy={"archive": {"url": "s3://bucket/p"}}))

    def no_client(url, **_):
        raise ImportError("No module named 'boto3'")
    archiver = Archiver(ArchiveMetrics(CollectorRegistry()), tier_factory=no_client)
    try:
        assert archiver.sync(config, AuditTrail(str(tmp_path / "audit.jsonl"))) == {"archive:staging": 30.0}
        assert archiver.upload("staging") == 0
        state = archiver.status()["staging"]
    finally:
        archiver.close()
    assert state["failures"] == 1 and state["last_error"] == \
        "archive s3://bucket/p: cannot be opened: No module named 'boto3'"
    assert state["lag_bytes"] > 0


def test_a_year_ahead_total_retention_deletes_nothing_from_the_archive_until_the_clock_is_accepted(tmp_path):
    from retention.deletion.clockguard import ClockGuard

    bases = make_log(tmp_path / "staging", 3)
    url = f"file://{tmp_path}/archive"
    clock, boot = Clock(), [100.0]
    guard = ClockGuard(86400, clock=clock, elapsed=lambda: boot[0])
    guard.start(clock.now)
    _, config = write_config(tmp_path, config_text(tmp_path, policy={"archive": {"url": url, "reserve": "2h"}}))
    archiver = Archiver(ArchiveMetrics(CollectorRegistry()), clock=clock, expiry_clock=guard.judged)
    archiver.sync(config, AuditTrail(str(tmp_path / "audit.jsonl")))
    try:
        assert archiver.upload("staging") == 3
        with CommitLog.open(tmp_path / "staging", readonly=True) as log:
            for _ in range(3):
                log.remove_head()                  # evicted locally: only the archive holds them
        clock.now += 365 * 86400                   # the wall clock steps; the boot clock does not
        archiver.upload("staging")
        assert archived_bases(url, "staging") == bases[:3]
        guard.accept()
        archiver.upload("staging")
    finally:
        archiver.close()
    assert archived_bases(url, "staging") == []


def test_an_object_deleted_on_the_tier_is_not_evicted_and_sent_again_while_the_disk_holds_it(tmp_path):
    bases = make_log(tmp_path / "staging", 3)
    url = f"file://{tmp_path}/archive"
    archiver = _archiver(tmp_path, time.time, {"url": url})
    assert archiver.upload("staging") == 3
    victim = tmp_path / "archive" / "staging" / f"{bases[1]:020d}.log"
    victim.unlink()
    # The next run finds it missing: remembered (eviction passes it over), named, sent again.
    assert archiver.upload("staging") == 1 and victim.exists()
    assert read_state(str(tmp_path / "staging")).unconfirmed == (bases[1],)
    [(log, message)] = archiver.missing()
    assert log == "staging" and f"[{bases[1]}]" in message
    _, config = write_config(tmp_path, config_text(tmp_path, policy={"archive": {"url": url}}))
    watched = WatchedLog("staging", config.logs["staging"], archive=config.policy_for("staging").archive)
    snapshot, _ = watched.snapshot()
    assert [s.archived_at is not None for s in snapshot.segments] == [True, False, True, False]
    watched.close()
    assert archiver.upload("staging") == 0                 # found again: nothing missing
    assert archiver.missing() == [] and read_state(str(tmp_path / "staging")).unconfirmed == ()
    archiver.close()


@pytest.mark.parametrize("then", ["asked-again", "unreachable", "gone-mid-check"])
def test_a_server_restarted_empty_in_the_middle_of_a_runs_object_check_evicts_nothing(tmp_path, s3_credentials, then):
    """The run proved the tier, found the objects of the oldest listed segments, then the server
    died and came back empty (no bucket): the rest of its check found their objects missing. A
    tier that lost what it listed evicts nothing, not only the segments its check got to: the
    run asks it to prove itself again, and remembers it missing when it cannot (no bucket), or
    when it cannot be asked at all (the server gone again)."""
    server = S3Server().start()
    server.make_bucket()
    proxy = TcpProxy(server.port)
    log_dir = tmp_path / "staging"
    bases = make_log(log_dir, 6)
    archive = {"url": f"s3://{BUCKET}/tier", "endpoint": proxy.endpoint, "region": "us-east-1"}
    _, config = write_config(tmp_path, config_text(tmp_path, policy={"archive": archive}))
    archiver = Archiver(ArchiveMetrics(CollectorRegistry()))
    archiver.sync(config, AuditTrail(str(tmp_path / "audit.jsonl")))
    try:
        assert archiver.upload("staging") == 6
        # The next run asks for the objects of the four oldest, then the tier hangs ...
        proxy.hold_after(f"{bases[3]:020d}.index".encode())
        run = threading.Thread(target=archiver.upload, args=("staging",))
        run.start()
        assert proxy.held.wait(60)
        server.kill()
        server.start()                         # ... and comes back empty: no bucket, no object
        proxy.up()
        if then == "unreachable":              # gone again once the check asked for the last one
            proxy.hold_after(f"{bases[5]:020d}.index".encode())
            assert proxy.held.wait(60)
            proxy.down()
        if then == "gone-mid-check":           # gone again before the check asked for the last one
            proxy.hold_after(f"{bases[4]:020d}.index".encode())
            assert proxy.held.wait(60)
            proxy.down()
        run.join(120)
        assert not run.is_alive()
        assert [log for log, _ in archiver.missing()] == ["staging"]    # /healthz: archive-missing
        set_age(log_dir, bases[:6], 2 * 3600)
        result = manual_pass(config)
        assert result.deleted == 0 and segment_bases(log_dir) == bases
        missing = read_state(str(log_dir)).missing
        assert missing is not None and (("could not be asked again" in missing) == (then != "asked-again")), missing
    finally:
        archiver.close()
        proxy.close()
        server.kill()


def test_a_check_that_fails_after_finding_listed_objects_missing_still_keeps_them_from_eviction(tmp_path):
    """A run's object check found the objects of the oldest listed segment gone from the tier,
    then the tier failed on the next one (here a real ELOOP from the directory tier; an S3
    server that restarted empty and then refused a connection alike). What the check found
    must not be forgotten with the run: the segment whose objects are gone is never evicted."""
    log_dir = tmp_path / "staging"
    bases = make_log(log_dir, 6)
    url = f"file://{tmp_path}/archive"
    archiver = _archiver(tmp_path, time.time, {"url": url})
    try:
        assert archiver.upload("staging") == 6
        tier_dir = tmp_path / "archive" / "staging"
        for suffix in (".log", ".index"):
            (tier_dir / f"{bases[0]:020d}{suffix}").unlink()          # gone from the tier
        broken = tier_dir / f"{bases[1]:020d}.log"
        broken.unlink()
        broken.symlink_to(broken.name)                                  # asking for it fails: ELOOP
        archiver.upload("staging")                                     # fails at bases[1]
    finally:
        archiver.close()
    _, config = write_config(tmp_path, config_text(tmp_path, policy={"archive": {"url": url}}))
    set_age(log_dir, bases[:6], 2 * 3600)
    manual_pass(config)
    assert bases[0] in segment_bases(log_dir), read_state(str(log_dir))
