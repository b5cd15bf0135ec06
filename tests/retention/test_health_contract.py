"""The health contract (docs/operations.md, "Health", `retention.scheduling.problems`), on a real `retention serve`:
every named problem makes `/healthz` 503 and `/status` unhealthy, gives one WARNING line when it
starts and one INFO line when it clears, and shows in `retention_health_problems{problem}`;
`/readyz` says why it is not ready; the liveness probe's path (`/livez`, as the Kubernetes manifest
names it) fails only where a restart helps.

Before the contract, a log on a read-only mount failed every pass while `/healthz` said 200 `ok`
and no WARNING was logged; a vanished log directory was silent too."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from commitlog import CommitLog

from retention import RetentionScheduler
from retention.web.server import RetentionHTTPServer

from kubernetes_helpers import probe_path
from retention_helpers import config_text, make_log, set_age, write_config
from sidecar_helpers import Sidecar

LIVENESS = probe_path("livenessProbe")      # what the Kubernetes manifest's liveness probe asks


def _config(tmp, log, *, interval="1s", pause="0ms", logs: dict | None = None) -> str:
    """Every hour a delete hour, a second's reserve: each pass deletes what has aged."""
    return config_text(tmp, sidecar=True, service={"failed_passes_unhealthy": 3},
                       logs={**(logs or {}), "staging": {"path": str(log), "segment_size": "4KiB"}},
                       policy={"interval": interval, "delete_at_hours": list(range(24)), "reserve": "1s",
                               "files_per_pass": 100, "pause_between_files": pause, "disk_check_interval": "1s"})


def _problems(s: Sidecar) -> list[tuple[str, str | None]]:
    return [(d["problem"], d["log"]) for d in s.get_json("/healthz")[1]["details"]]


def _remount(mountpoint: str, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", mountpoint], check=True, capture_output=True)


@pytest.mark.parametrize("small_fs", [("tmpfs", 8 << 20)], indirect=True)
def test_passes_failing_on_a_read_only_mount_are_a_problem_said_once_and_cleared_once(small_fs, tmp_path):
    log = os.path.join(small_fs, "staging")
    bases = make_log(log, 4)
    set_age(Path(log), bases[:-1], 3600)   # expired: every pass must delete
    _remount(small_fs, "ro")
    path, _ = write_config(tmp_path, _config(tmp_path, log))
    try:
        with Sidecar(path, cwd=tmp_path) as s:
            s.wait_for(lambda: ("passes-failing", "staging") in _problems(s), timeout=30,
                       what="passes-failing on the read-only log")
            status, body = s.get_json("/healthz")
            assert status == 503 and body["status"] == "unhealthy"
            assert "the last 3 passes failed" in body["details"][0]["message"]
            assert s.get_json(LIVENESS)[0] == 200          # a restart cannot fix a read-only mount
            assert s.get_json("/readyz")[0] == 200         # its first pass ran (and failed): ready
            st = s.get_json("/status")[1]
            assert st["healthy"] is False
            assert [p["problem"] for p in st["health"]["problems"]] == ["passes-failing"]
            metrics = s.request("GET", "/metrics")[2].decode()
            assert 'retention_health_problems{problem="passes-failing"} 1.0' in metrics
            time.sleep(4)            # more failing passes: still one WARNING line, not one a pass
            assert s.log().count("problem started: passes-failing") == 1, s.log()
            assert "WARNING" in s.log()
            _remount(small_fs, "rw")
            s.wait_for(lambda: s.request("GET", "/healthz")[0] == 200, timeout=30, what="healthy again")
            s.wait_for(lambda: "problem cleared: passes-failing" in s.log(), what="the cleared line")
            assert s.log().count("problem cleared: passes-failing") == 1
            assert 'retention_health_problems{problem="passes-failing"} 0.0' in \
                s.request("GET", "/metrics")[2].decode()
    finally:
        _remount(small_fs, "rw")


def test_a_log_directory_that_vanishes_is_a_problem_and_one_never_created_is_said_once(tmp_path):
    log = tmp_path / "staging"
    later = tmp_path / "later"
    make_log(log, 2)
    path, _ = write_config(tmp_path, _config(tmp_path, log, logs={"later": {"path": str(later), "segment_size": "4KiB"}}))
    with Sidecar(path, cwd=tmp_path) as s:
        s.wait_ready()
        time.sleep(2.5)
        assert s.request("GET", "/healthz")[0] == 200          # not created yet is normal
        assert s.log().count(f"directory {later} does not exist yet") == 1
        os.rename(log, tmp_path / "moved-away")
        s.wait_for(lambda: ("log-missing", "staging") in _problems(s), timeout=15, what="log-missing")
        assert s.get_json(LIVENESS)[0] == 200
        os.rename(tmp_path / "moved-away", log)
        s.wait_for(lambda: s.request("GET", "/healthz")[0] == 200, timeout=15, what="healthy again")
        assert s.log().count("problem started: log-missing") == 1
        assert s.log().count("problem cleared: log-missing") == 1


def test_readyz_names_the_logs_whose_first_pass_has_not_finished(tmp_path):
    log = tmp_path / "staging"
    bases = make_log(log, 4)
    set_age(log, bases[:-1], 3600)
    path, _ = write_config(tmp_path, _config(tmp_path, log, interval="1h", pause="1500ms"))
    with Sidecar(path, cwd=tmp_path) as s:
        status, body = s.get_json("/readyz")          # the first pass pauses 1.5 s between files
        assert status == 503 and body == {"status": "not ready",
                                          "reasons": ["the first pass has not finished for log staging"]}
        s.wait_ready(timeout=30)
        assert s.get_json("/readyz") == (200, {"status": "ready", "reasons": []})


def _get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_stopped_scheduler_and_a_stalled_disk_check_are_named_and_fail_livez(tmp_path):
    log = tmp_path / "staging"
    make_log(log, 2)
    _, config = write_config(tmp_path, _config(tmp_path, log, interval="1h"))
    scheduler = RetentionScheduler(config, watch_rolls=False)
    assert scheduler.not_ready_reasons() == ["the scheduler has not started"]
    server = RetentionHTTPServer(scheduler, config.service)
    server.start()
    scheduler.start()
    try:
        deadline = time.monotonic() + 10
        while scheduler.not_ready_reasons() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert scheduler.health() == (True, [])
        assert _get(server.url + LIVENESS) == (200, {"status": "ok", "problems": [], "details": []})
        scheduler._scheduler.pause_job("disk-check")      # the disk check's thread stops answering
        deadline = time.monotonic() + 10
        while scheduler.health()[0] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [p.kind for p in scheduler.health_problems()] == ["disk-check-stalled"]
        status, body = _get(server.url + LIVENESS)         # a restart helps: the liveness probe fails
        assert status == 503 and [d["problem"] for d in body["details"]] == ["disk-check-stalled"]
        scheduler._scheduler.resume_job("disk-check")
        deadline = time.monotonic() + 10
        while _get(server.url + LIVENESS)[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _get(server.url + LIVENESS)[0] == 200
        scheduler._scheduler.pause()                       # the scheduler stops running its jobs
        status, body = _get(server.url + LIVENESS)
        assert status == 503 and [d["problem"] for d in body["details"]] == ["scheduler-stopped"]
        assert _get(server.url + "/healthz")[0] == 503
        scheduler._scheduler.resume()
        assert "scheduler-stopped" not in [p.kind for p in scheduler.health_problems()]   # cleared
    finally:
        from loguru import logger
        said: list[str] = []
        sink = logger.add(lambda m: said.append(f"{m.record['level'].name} {m.record['message']}"), level="INFO")
        scheduler.stop()
        try:
            # Stopping on request: /healthz names it, /livez does not fail (the process is exiting).
            assert [p.kind for p in scheduler.health_problems()] == ["scheduler-stopped"]
            logger.remove(sink)
            started = [line for line in said if "problem started: scheduler-stopped" in line]
            assert started and all(line.startswith("INFO ") for line in started), said   # no fault: no WARNING
            assert scheduler.not_ready_reasons() == ["the scheduler is stopping"]
            assert _get(server.url + LIVENESS)[0] == 200 and _get(server.url + "/healthz")[0] == 503
        finally:
            server.stop()


def test_a_second_sidecar_leaves_a_log_another_owns_says_who_and_takes_over_when_it_dies(tmp_path):
    # Before: two sidecars on one log both acted; 92 of 93 audit lines were `aborted head-changed`.
    log = tmp_path / "staging"
    make_log(log, 3)
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first_dir.mkdir()
    second_dir.mkdir()
    first_cfg, _ = write_config(first_dir, _config(first_dir, log))
    second_cfg, _ = write_config(second_dir, _config(second_dir, log))
    with Sidecar(first_cfg, cwd=first_dir) as first:
        first.wait_ready()
        with Sidecar(second_cfg, cwd=second_dir) as second:
            second.wait_for(lambda: ("log-owned-elsewhere", "staging") in _problems(second), timeout=15,
                            what="log-owned-elsewhere on the second sidecar")
            status, body = second.get_json("/healthz")
            assert status == 503
            assert second.get_json(LIVENESS)[0] == 200    # a restart would find the same owner
            assert second.get_json("/readyz")[0] == 200
            [detail] = [d for d in body["details"] if d["problem"] == "log-owned-elsewhere"]
            assert f"pid {first.proc.pid}" in detail["message"]
            staging = _log_status(second)
            assert staging["owned_by"] == {"pid": first.proc.pid}
            assert staging["last_pass"]["outcome"] == "owned-elsewhere"
            assert first.request("GET", "/healthz")[0] == 200           # the owner is healthy
            assert _log_status(first)["owned_by"] is None
            # New expired segments: only the owner deletes them, so no audit line is aborted.
            with CommitLog.open(log) as writer:
                while len(writer.segments()) < 8:
                    writer.append_batch([b"x" * 200] * 4)
            set_age(log, [s.base_offset for s in writer_segments(log)[:-1]], 3600)
            first.wait_for(lambda: len(writer_segments(log)) == 1, timeout=15, what="the owner's deletions")
            time.sleep(1.5)
            assert not (second_dir / "audit.jsonl").exists() or \
                "aborted" not in (second_dir / "audit.jsonl").read_text()
            assert "aborted" not in (first_dir / "audit.jsonl").read_text()
            assert second.log().count("problem started: log-owned-elsewhere") == 1
            first.proc.kill()                                   # SIGKILL: the kernel drops its lock
            first.proc.wait(10)
            second.wait_for(lambda: second.request("GET", "/healthz")[0] == 200, timeout=15,
                            what="the second sidecar owning the log")
            assert _log_status(second)["owned_by"] is None
            assert second.log().count("problem cleared: log-owned-elsewhere") == 1


def _log_status(s: Sidecar, name: str = "staging") -> dict:
    [log] = [log for log in s.get_json("/status")[1]["logs"] if log["name"] == name]
    return log


def writer_segments(log):
    with CommitLog.open(log, readonly=True) as reader:
        return reader.segments()


def test_many_logs_going_at_once_are_said_in_one_line_and_a_few_each_in_their_own(tmp_path):
    """A problem that starts for thousands of logs at once (a first pass over 10,000 logs making
    each late, a mount gone) was 10,000 lines started and 10,000 cleared: past LINES_A_KIND
    logs of one kind at once, one line says them all; a few keep a line each."""
    from retention.scheduling.problems import LINES_A_KIND
    many = LINES_A_KIND + 3
    logs = {f"l{i:02d}": {"path": str(tmp_path / "many" / f"l{i:02d}"), "segment_size": "4KiB"} for i in range(many)}
    for name in logs:
        make_log(tmp_path / "many" / name, 1)
    make_log(tmp_path / "staging", 1)
    path, _ = write_config(tmp_path, _config(tmp_path, tmp_path / "staging", logs=logs))
    with Sidecar(path, cwd=tmp_path) as s:
        s.wait_ready()
        os.rename(tmp_path / "many", tmp_path / "away")
        s.wait_for(lambda: sum(p == "log-missing" for p, _ in _problems(s)) == many, timeout=20, what="all missing")
        os.rename(tmp_path / "away", tmp_path / "many")
        s.wait_for(lambda: s.request("GET", "/healthz")[0] == 200, timeout=20, what="healthy again")
        os.rename(tmp_path / "staging", tmp_path / "staging-away")
        s.wait_for(lambda: ("log-missing", "staging") in _problems(s), timeout=20, what="staging missing")
        said = s.log()
    assert said.count(f"problem started for {many} logs: log-missing (l00, l01") == 1, said
    assert said.count(f"problem cleared for {many} logs: log-missing") == 1, said
    assert said.count("problem started: log-missing: log l") == 0, said
    assert said.count("problem started: log-missing: log staging") == 1, said
