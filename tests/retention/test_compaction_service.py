"""Compaction run by the scheduler (its job, compact()), the `retention compact` command, POST /compact
on a real sidecar over loopback, /status and the metrics."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time

import pytest

from policies import RetentionConfig
from retention import PassRunningError, RetentionScheduler
from retention.scheduling.jobs import desired_jobs

from compaction_helpers import compaction_config, dead_log, digest_tree, dir_bytes, scan_pairs
from sidecar_helpers import Sidecar

CONTRACT_LOG_KEYS = {"name", "path", "outputs", "reclaimed_bytes"}
CONTRACT_OUTPUT_KEYS = {"segment", "inputs", "bytes_before", "bytes_after", "dropped"}


def _metric(text: str, name: str, **labels) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(f"{name}{{{want}}} ") or (not labels and line.startswith(f"{name} ")):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_the_compact_job_fires_on_its_interval_and_reclaims(tmp_path):
    live = dead_log(tmp_path / "a", 4)
    before = dir_bytes(tmp_path / "a")
    _, config = compaction_config(tmp_path, tmp_path / "a", interval="200ms")
    scheduler = RetentionScheduler(config, watch_rolls=False)
    assert "compact:default" in {j["id"] for j in (scheduler.start() or scheduler.jobs())}
    try:
        deadline = time.monotonic() + 10
        while dir_bytes(tmp_path / "a") == before and time.monotonic() < deadline:
            time.sleep(0.05)
        last = None
        while last is None and time.monotonic() < deadline:
            last = scheduler.status()["compaction"]["last"]
            time.sleep(0.05)
    finally:
        scheduler.stop()
    assert dir_bytes(tmp_path / "a") < before
    assert last["kind"] == "interval" and last["reclaimed_bytes"] > 0
    text = scheduler.metrics.exposition().decode()
    assert _metric(text, "retention_compaction_reclaimed_bytes_total", log="a") == before - dir_bytes(tmp_path / "a")
    assert _metric(text, "retention_compaction_bytes_total", log="a", direction="read") > 0
    assert _metric(text, "retention_compaction_bytes_total", log="a", direction="written") > 0
    assert _metric(text, "retention_compaction_duration_seconds_count") >= 1
    assert scan_pairs(tmp_path / "a") == live


def test_no_compact_job_for_a_policy_with_compaction_off(tmp_path):
    _, config = compaction_config(tmp_path, tmp_path / "a", enabled="false")
    jobs = desired_jobs(config, cleanup=print, hung=print, disk_check=print, compact=print)
    assert "compact:default" not in jobs and "cleanup:default" in jobs
    on = RetentionConfig.model_validate({"logs": {"a": {"path": str(tmp_path / "b")}}})
    assert desired_jobs(on, cleanup=print, hung=print, disk_check=print, compact=print)["compact:default"].every == 300


def test_compact_in_process_refuses_a_second_one_on_the_same_filesystem(tmp_path):
    dead_log(tmp_path / "a", 3)
    _, config = compaction_config(tmp_path, tmp_path / "a", max_bytes_per_second="2KiB", merge="false")
    scheduler = RetentionScheduler(config, watch_rolls=False)
    results, errors = [], []
    first = threading.Thread(target=lambda: results.append(scheduler.compact()))
    first.start()
    try:
        deadline = time.monotonic() + 10
        while not any(r.get("outputs_planned") for r in scheduler.status()["compaction"]["running"]) \
                and time.monotonic() < deadline:
            time.sleep(0.01)
        running = scheduler.status()["compaction"]["running"]
        assert running and running[0]["log"] == "a" and running[0]["outputs_planned"] == 3
        with pytest.raises(PassRunningError, match="compaction is running on"):
            scheduler.compact()
        errors.append("refused")
    finally:
        scheduler.stop()      # the running pass ends between two outputs
        first.join(30)
    assert errors == ["refused"] and results and results[0].outputs >= 1


def test_cli_json_follows_the_contract_and_dry_run_touches_no_file(tmp_path):
    live = dead_log(tmp_path / "a", 4)
    config_path, _ = compaction_config(tmp_path, tmp_path / "a")
    before = digest_tree(tmp_path)
    dry = subprocess.run([sys.executable, "-m", "retention.cli", "compact", "--config", str(config_path), "--json",
                          "--dry-run"], capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    assert digest_tree(tmp_path) == before
    planned = json.loads(dry.stdout)
    real = subprocess.run([sys.executable, "-m", "retention.cli", "compact", "--config", str(config_path), "--json"],
                          capture_output=True, text=True, timeout=60)
    assert real.returncode == 0, real.stderr
    done = json.loads(real.stdout)
    for body in (planned, done):
        assert {"at", "logs"} <= set(body)
        (log,) = body["logs"]
        assert CONTRACT_LOG_KEYS <= set(log) and log["name"] == "a" and log["path"] == str(tmp_path / "a")
        assert log["outputs"] and all(set(o) == CONTRACT_OUTPUT_KEYS for o in log["outputs"])
        for o in log["outputs"]:
            assert set(o["dropped"]) == {"dead", "superseded", "tombstone"}
            assert re.fullmatch(r"\d{20}\.log", o["segment"]) and o["segment"] == o["inputs"][0]
    assert [o["inputs"] for o in planned["logs"][0]["outputs"]] == [o["inputs"] for o in done["logs"][0]["outputs"]]
    assert done["logs"][0]["reclaimed_bytes"] == sum(o["bytes_before"] - o["bytes_after"]
                                                     for o in done["logs"][0]["outputs"]) > 0
    assert scan_pairs(tmp_path / "a") == live
    table = subprocess.run([sys.executable, "-m", "retention.cli", "compact", "--config", str(config_path)],
                           capture_output=True, text=True, timeout=60)
    assert table.returncode == 0 and "nothing to compact" in table.stdout


def test_cli_with_a_bad_config_says_what_is_wrong_in_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("policies:\n  default:\n    compaction:\n      max_live_ratio: 2\n")
    done = subprocess.run([sys.executable, "-m", "retention.cli", "compact", "--config", str(bad)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "max_live_ratio" in lines[0] and "bad.yaml" in lines[0]


def test_post_compact_needs_the_token_and_a_second_one_gets_409_while_one_runs(tmp_path):
    live = dead_log(tmp_path / "a", 3)
    config_path, _ = compaction_config(tmp_path, tmp_path / "a", token="tok", interval="1h", merge="false",
                                       max_bytes_per_second="4KiB")
    auth = {"Authorization": "Bearer tok"}
    with Sidecar(config_path, cwd=tmp_path) as s:
        s.wait_ready()
        assert s.request("POST", "/compact")[0] == 401
        answers = []
        first = threading.Thread(target=lambda: answers.append(s.request("POST", "/compact", headers=auth)))
        first.start()
        s.wait_for(lambda: any(r.get("outputs_planned") for r in s.get_json("/status")[1]["compaction"]["running"]),
                   what="a running compaction")
        status, _, body = s.request("POST", "/compact", headers=auth)
        assert status == 409
        refused = json.loads(body)
        assert refused["running"] == "compaction" and "log a" in refused["error"]
        first.join(60)
        (code, _, body), = answers
        assert code == 200
        result = json.loads(body)
        assert len(result["logs"][0]["outputs"]) == 3 and result["logs"][0]["reclaimed_bytes"] > 0
        last = s.get_json("/status")[1]["compaction"]["last"]
        assert last["kind"] == "manual" and last["outputs"] == 3
        code, text = s.request("GET", "/metrics")[::2]
        assert _metric(text.decode(), "retention_compaction_reclaimed_bytes_total", log="a") == \
            result["logs"][0]["reclaimed_bytes"]
    assert scan_pairs(tmp_path / "a") == live


def test_a_post_with_a_mistyped_or_unknown_query_gets_400_and_changes_nothing(tmp_path):
    dead_log(tmp_path / "a", 3)
    config_path, _ = compaction_config(tmp_path, tmp_path / "a", interval="1h")
    with Sidecar(config_path, cwd=tmp_path) as s:
        s.wait_ready()
        before = digest_tree(tmp_path / "a")
        for query, words in (("dry_run=ye", "dry_run must be"), ("dry_run", "dry_run must be"),
                             ("dryrun=1", "takes dry_run, not 'dryrun'"), ("force=1", "not 'force'")):
            status, _, body = s.request("POST", f"/compact?{query}")
            assert status == 400 and words in json.loads(body)["error"], (query, body)
        status, _, body = s.request("POST", "/clean?force=maybe")
        assert status == 400 and "force must be" in json.loads(body)["error"]
        assert digest_tree(tmp_path / "a") == before
        assert s.get_json("/status")[1]["compaction"]["last"] is None
        status, _, body = s.request("POST", "/compact?dry_run=on")    # a real dry run: still nothing
        assert status == 200 and json.loads(body)["dry_run"] is True
        assert digest_tree(tmp_path / "a") == before


PRESSURE = """
service:
  audit: {audit}
logs:
  a:
    path: {log}
    segment_size: 512KiB
policies:
  default:
    interval: 1h
    delete_at_hours: []
    reserve: 1h
    disk:
      clean_ratio: 0.3
      force_ratio: 0.5
      force_target: 0.3
      refuse_writes_ratio: 0.95
      force: false             # deletion may not touch these young, unconsumed segments
    compaction:
      interval: 1h             # only the pressure path compacts during the test
"""


def test_above_force_ratio_with_everything_protected_and_mostly_dead_compaction_frees_space(small_fs, tmp_path):
    from commitlog import CommitLog, disk_usage
    log_dir = f"{small_fs}/a"
    with CommitLog.open(log_dir, segment_size=512 << 10, flush="none") as log:
        while len(log.segments()) < 11:
            log.append_batch([b"p" * 1000] * 64)
        log.mark_dead([o for o in range(log.end_offset) if o % 10])     # 90 % dead
        log.commit("etl", 0)                                             # nothing consumed
        live = [(r.offset, bytes(r.value)) for r in log.scan()]
    before = disk_usage(small_fs).used_ratio
    assert before > 0.5
    config_path = tmp_path / "pressure.yaml"
    config_path.write_text(PRESSURE.format(audit=tmp_path / "audit.jsonl", log=log_dir))
    from policies import load_config
    scheduler = RetentionScheduler(load_config(config_path), watch_rolls=False)
    scheduler.start()
    try:
        deadline = time.monotonic() + 20
        while disk_usage(small_fs).used_ratio > 0.3 and time.monotonic() < deadline:
            time.sleep(0.05)
        last = scheduler.status()["compaction"]["last"]
    finally:
        scheduler.stop()
    after = disk_usage(small_fs).used_ratio
    assert after <= 0.3 < 0.5 < before
    assert last["kind"] == "pressure" and last["reclaimed_bytes"] > 0
    assert scan_pairs(log_dir) == live


def test_on_a_terminal_the_cli_prints_a_progress_line_per_output(tmp_path):
    import os
    import pty
    dead_log(tmp_path / "a", 4)
    config_path, _ = compaction_config(tmp_path, tmp_path / "a", merge="false")
    main, side = pty.openpty()
    try:
        done = subprocess.run([sys.executable, "-m", "retention.cli", "compact", "--config", str(config_path),
                               "--json"], stdout=subprocess.PIPE, stderr=side, timeout=60)
        os.close(side)
        side = None
        out = b""
        while True:
            try:
                chunk = os.read(main, 4096)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
    finally:
        if side is not None:
            os.close(side)
        os.close(main)
    assert done.returncode == 0
    lines = [ln for ln in out.decode().splitlines() if "replaced" in ln]
    assert len(lines) == 4 and all(ln.startswith("a: ") and "dropped dead 22" in ln for ln in lines)
    assert len(json.loads(done.stdout)["logs"][0]["outputs"]) == 4
