"""A real `retention serve` process on a temporary configuration and a free loopback port: every
endpoint answers as specified, and POST /clean deletes what /plan said."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from commitlog import CommitLog
from retention import read_audit

from retention_helpers import config_text, make_log, segment_bases, set_age, write_config
from sidecar_helpers import Sidecar

TOKEN = "s3cret-token"



def _config(tmp, log_dir, *, service: dict | None = None, policy: dict | None = None) -> str:
    """Passes hourly (only the first, at start, runs during a test); no delete hours: only POST
    /clean deletes."""
    return config_text(tmp, sidecar=True, log={"path": str(log_dir)},
                       service={"log_level": "DEBUG", "token": TOKEN, **(service or {})},
                       policy={"files_per_pass": 3, **(policy or {})})


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("endpoints")
    log_dir = tmp / "staging"
    bases = make_log(log_dir, 8)
    set_age(log_dir, bases[:5], 7200)                      # five expired, three young, one active
    with CommitLog.open(log_dir, readonly=True) as log:
        end = log.end_offset
        log.commit("etl", bases[6] + 1)                      # inside segment 6: 6, 7, active unconsumed
        log.mark_dead(range(bases[2], bases[2] + 5))         # 5 x 121 dead bytes in a sealed segment
        log.mark_dead([end - 1])                             # the active segment's: not counted
    config_path, _ = write_config(tmp, _config(tmp, log_dir))
    with Sidecar(config_path, cwd=tmp) as s:
        s.wait_ready()
        s.tmp, s.log_dir, s.bases, s.end = tmp, log_dir, bases, end
        yield s


def test_livez_healthz_and_readyz(sidecar):
    status, body = sidecar.get_json("/healthz")
    assert (status, body) == (200, {"status": "ok", "problems": [], "warnings": [], "details": []})
    assert sidecar.get_json("/livez") == (200, {"status": "ok", "problems": [], "details": []})
    status, body = sidecar.get_json("/readyz")
    assert (status, body) == (200, {"status": "ready", "reasons": []})


def test_metrics_are_prometheus_text_with_the_documented_families(sidecar):
    status, headers, body = sidecar.request("GET", "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    text = body.decode()
    segments = len(sidecar.bases)
    for line in (f'retention_log_segments{{log="staging"}} {segments}.0',
                 f'retention_log_bytes{{log="staging"}} {segments * 4096}.0',
                 'retention_hung_segments{log="staging"} 0.0',
                 'retention_log_dead_bytes{log="staging"} 605.0',
                 'retention_pinned_bytes{log="staging"} 0.0',
                 'retention_passes_total{kind="interval",outcome="ok"} 1.0',
                 'retention_policy_interval_seconds{policy="default"} 3600.0'):
        assert line in text, line
    for family in ("retention_disk_used_ratio{mountpoint=", "retention_pass_duration_seconds_bucket",
                   'retention_consumer_lag_bytes{group="etl",log="staging"} 12288.0',
                   'retention_consumer_lag_records{group="etl",log="staging"}',
                   'retention_last_successful_pass_timestamp_seconds{log="staging"}',
                   "process_resident_memory_bytes"):
        assert family in text, family
    assert "_created" not in text


def test_status_reports_each_log_with_disk_segments_last_pass_and_consumer_lag(sidecar):
    status, body = sidecar.get_json("/status")
    assert status == 200
    assert body["healthy"] and body["ready"] and body["interval_seconds"] == 3600
    assert body["policies"]["default"]["interval_seconds"] == 3600
    (log,) = body["logs"]
    assert log["name"] == "staging" and log["path"] == str(sidecar.log_dir)
    assert 0 < log["disk"]["used_ratio"] < 1 and log["disk"]["total_bytes"] > 0
    assert log["segments"] == len(sidecar.bases) and log["bytes"] == len(sidecar.bases) * 4096
    assert log["start_offset"] == sidecar.bases[0] and log["end_offset"] == sidecar.end
    assert log["triggers"] == []
    assert log["last_pass"]["kind"] == "interval" and log["last_pass"]["outcome"] == "ok"
    assert log["last_pass"]["deleted"] == 0 and log["last_pass"]["finished_at"]
    assert log["hung"] == [] and log["pinned"] == [] and log["pinned_bytes"] == 0
    (etl,) = log["consumer_groups"]
    assert etl["group"] == "etl" and etl["committed_offset"] == sidecar.bases[6] + 1
    assert etl["lag_records"] == sidecar.end - (sidecar.bases[6] + 1)
    assert etl["lag_bytes"] == 3 * 4096                      # segments 6, 7 and the active one
    assert "approximate" in body["lag_note"]
    assert {j["id"] for j in body["jobs"]} == {"cleanup:default", "hung:default", "disk-check", "compact:default"}
    assert body["compaction"] == {"running": [], "last": None, "logs": {}}


def test_status_command_prints_it_readably_and_as_json(sidecar):
    run = [sys.executable, "-m", "retention.cli", "status", "--url", sidecar.url]
    text = subprocess.run(run, capture_output=True, text=True, timeout=30)
    assert text.returncode == 0, text.stderr
    assert "healthy" in text.stdout and "log staging" in text.stdout
    assert "consumer etl: committed" in text.stdout and "last pass" in text.stdout
    as_json = subprocess.run(run + ["--json"], capture_output=True, text=True, timeout=30)
    assert json.loads(as_json.stdout)["logs"][0]["name"] == "staging"
    down = subprocess.run([sys.executable, "-m", "retention.cli", "status", "--url", "http://127.0.0.1:9"],
                          capture_output=True, text=True, timeout=30)
    assert down.returncode == 3 and "cannot reach" in down.stderr   # 3: unreachable (EXIT_CODES)


def test_wrong_paths_and_methods(sidecar):
    assert sidecar.request("GET", "/nope")[0] == 404
    status, headers, _ = sidecar.request("GET", "/clean")
    assert status == 405 and headers["Allow"] == "POST"
    assert sidecar.request("POST", "/status")[0] == 405


def test_post_clean_needs_the_token_and_deletes_what_plan_said(sidecar):
    # /plan is `retention plan --json`: no trigger now, every segment kept.
    status, plan = sidecar.get_json("/plan")
    assert status == 200 and set(plan) == {"at", "config", "kind", "logs"} and plan["kind"] == "plan"
    assert plan["config"] == str(sidecar.config_path)
    files = plan["logs"][0]["files"]
    assert [f["action"] for f in files] == ["keep"] * len(sidecar.bases)
    assert all("no-trigger" in f["reasons"] for f in files)
    # ?manual=1 previews the pass a manual trigger runs: the three oldest expired segments.
    status, preview = sidecar.get_json("/plan?manual=1")
    planned = [f["segment"] for f in preview["logs"][0]["files"] if f["action"] == "delete"]
    assert planned == [f"{b:020d}.log" for b in sidecar.bases[:3]]

    before = segment_bases(sidecar.log_dir)
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        status, response_headers, _ = sidecar.request("POST", "/clean", headers=headers)
        assert status == 401 and response_headers["WWW-Authenticate"] == "Bearer"
    assert segment_bases(sidecar.log_dir) == before          # refused: nothing deleted

    status, _, body = sidecar.request("POST", "/clean", headers={"Authorization": f"Bearer {TOKEN}"})
    assert status == 200
    result = json.loads(body)
    deleted = [f["segment"] for f in result["logs"][0]["files"] if f["action"] == "deleted"]
    assert deleted == planned
    assert result["logs"][0]["triggers"] == ["manual"] and not result["interrupted"]
    assert segment_bases(sidecar.log_dir) == sidecar.bases[3:]
    audit = read_audit(str(sidecar.tmp / "audit.jsonl"))
    assert [e["segment"] for e in audit] == planned and all(e["triggers"] == ["manual"] for e in audit)
    assert "deleted 00000000000000000000.log" in sidecar.log()   # one INFO line per deletion

    status, after = sidecar.get_json("/status")
    log = after["logs"][0]
    assert log["segments"] == len(sidecar.bases) - 3
    assert log["last_pass"]["kind"] == "manual" and log["last_pass"]["deleted"] == 3
    assert log["manual_passes_left"] == 19
    text = sidecar.request("GET", "/metrics")[2].decode()
    assert 'retention_deleted_segments_total{log="staging",trigger="manual"} 3.0' in text
    assert 'retention_deleted_bytes_total{log="staging",trigger="manual"} 12288.0' in text


def test_json_log_format_gives_one_json_object_per_line(tmp_path):
    log_dir = tmp_path / "staging"
    bases = make_log(log_dir, 3)
    set_age(log_dir, bases[:-1], 7200)
    config_path, _ = write_config(tmp_path, _config(
        tmp_path, log_dir, service={"log_level": "INFO", "log_format": "json"},
        policy={"delete_at_hours": list(range(24))}))
    with Sidecar(config_path, cwd=tmp_path) as s:
        s.wait_for(lambda: len(segment_bases(log_dir)) == 1, what="the expired segments deleted")
    records = [json.loads(line)["record"] for line in s.log().splitlines()]
    deletions = [r for r in records if r["message"].startswith("staging: deleted ")]
    assert len(deletions) == len(bases) - 1 and all(r["level"]["name"] == "INFO" for r in deletions)
    assert any(r["message"].startswith("received SIGTERM") for r in records)


def test_the_service_modules_never_import_pyspark():
    code = ("import sys, retention.service.serve, retention.scheduling.scheduler, retention.web.server, retention.service.demo, "
            "retention.service.client, retention.scheduling.metrics, retention.service.notify, retention.cli; "
            "from retention import RetentionScheduler; "
            "assert not [m for m in sys.modules if m.split('.')[0] in ('pyspark', 'pyarrow', 'pandas')]")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
