"""A forward clock step deletes nothing that was not due: a real sidecar whose clock libfaketime steps
a year ahead while it runs, and one started with its clock a year ahead of everything on disk.

Before the guard, at +1 year every sealed segment was expired and `etl` stale (`consumer_ttl` 7d),
so the first pass after the step deleted every segment, those `etl` had not read included.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from clock_helpers import (audit_events, clock_problem, commit, faketime_env, fill_to, more_passes, segment_end,
                           step_clock)
from commitlog import disk_usage
from retention_helpers import config_text, make_log, segment_bases, write_config
from sidecar_helpers import Sidecar


def _setup(tmp_path, service: dict | None = None):
    """A log of 6 fresh 4 KiB segments (reserve 1h, a delete window every hour, a pass every
    second), `etl` having read the first two; `service` merges into the service's keys."""
    log_dir = tmp_path / "staging"
    bases = make_log(log_dir, 6)
    commit(str(log_dir), "etl", segment_end(str(log_dir), bases[1]))
    path, _ = write_config(tmp_path, config_text(tmp_path, sidecar=True, service=service, policy={
        "interval": "1s", "delete_at_hours": "00-23", "consumer_ttl": "7d", "disk_check_interval": "1s"}))
    return log_dir, bases, path, str(tmp_path / "audit.jsonl")


def _accept(sidecar) -> subprocess.CompletedProcess:
    """`retention clock accept --url`, run with the machine's clock."""
    return subprocess.run([sys.executable, "-m", "retention.cli", "clock", "accept", "--url", sidecar.url],
                          capture_output=True, text=True, timeout=120)


def _metric(sidecar, name: str) -> float:
    _, _, body = sidecar.request("GET", "/metrics")
    return next(float(line.split()[1]) for line in body.decode().splitlines() if line.startswith(name + " "))


def test_a_sidecar_stepped_a_year_ahead_deletes_nothing_until_the_operator_accepts(tmp_path):
    log_dir, bases, path, audit = _setup(tmp_path)
    stamp = tmp_path / "faketime"
    with Sidecar(path, cwd=tmp_path, env=faketime_env(stamp)) as sidecar:
        sidecar.wait_ready(timeout=60)
        more_passes(sidecar)
        assert segment_bases(log_dir) == bases and clock_problem(sidecar) is None

        step_clock(stamp, "+365d")
        problem = sidecar.wait_for(lambda: clock_problem(sidecar), what="clock-stepped")
        assert "between-looks" in problem
        more_passes(sidecar)
        assert segment_bases(log_dir) == bases, sidecar.log()
        assert audit_events(audit, "deleted") == []
        _, status = sidecar.get_json("/status")
        assert status["clock"]["detected"] == "between-looks" and status["clock"]["step_seconds"] > 364 * 86400
        assert _metric(sidecar, "retention_clock_step_seconds") > 364 * 86400
        _, plan = sidecar.get_json("/plan")
        kept = plan["logs"][0]["files"]
        assert "clock-step" in kept[0]["reasons"] and "unconsumed:etl" in kept[2]["reasons"]

        step_clock(stamp, "+0")                        # the clock comes back: the hold lifts by itself
        sidecar.wait_for(lambda: clock_problem(sidecar) is None, what="clock-stepped cleared")
        assert [e["event"] for e in audit_events(audit, "clock-returned")] == ["clock-returned"]

        step_clock(stamp, "+365d")
        sidecar.wait_for(lambda: clock_problem(sidecar), what="clock-stepped again")
        more_passes(sidecar)
        assert segment_bases(log_dir) == bases
        done = _accept(sidecar)
        assert done.returncode == 0 and "accepted the wall clock" in done.stdout, done.stderr
        sidecar.wait_for(lambda: clock_problem(sidecar) is None, what="clock-stepped cleared by accept")
        assert _metric(sidecar, "retention_clock_step_seconds") == 0
        # Accepted: a year on, every sealed segment is expired and etl is stale.
        sidecar.wait_for(lambda: segment_bases(log_dir) == bases[-1:], timeout=60, what="deletion resumed")
    events = [e["event"] for e in map(json.loads, open(audit)) if e["event"].startswith("clock-")]
    assert events == ["clock-stepped", "clock-returned", "clock-stepped", "clock-accepted"]
    assert "Traceback" not in sidecar.log(), sidecar.log()


def test_a_sidecar_started_a_year_ahead_of_the_disk_waits_for_the_operator(tmp_path):
    log_dir, bases, path, audit = _setup(tmp_path)
    stamp = tmp_path / "faketime"
    with Sidecar(path, cwd=tmp_path, env=faketime_env(stamp, "+365d", fixed=True)) as sidecar:
        problem = sidecar.wait_for(lambda: clock_problem(sidecar), what="clock-stepped at start")
        assert "at-start" in problem
        more_passes(sidecar)
        assert segment_bases(log_dir) == bases, sidecar.log()
        assert audit_events(audit, "deleted") == []
        stepped = audit_events(audit, "clock-stepped")
        assert len(stepped) == 1 and stepped[0]["detected"] == "at-start"
        assert stepped[0]["step_seconds"] > 364 * 86400
        done = _accept(sidecar)
        assert done.returncode == 0, done.stderr
        sidecar.wait_for(lambda: segment_bases(log_dir) == bases[-1:], timeout=60, what="deletion after accept")
    assert "Traceback" not in sidecar.log(), sidecar.log()


def _cli(tmp_path, stamp, *args) -> subprocess.CompletedProcess:
    """`retention ARGS --config retention.yaml` with the clock libfaketime reads from `stamp`."""
    return subprocess.run([sys.executable, "-m", "retention.cli", *args, "--config", str(tmp_path / "retention.yaml")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, **faketime_env(stamp, stamp.read_text().strip(), fixed=True)})


def test_a_manual_clean_on_a_host_a_year_ahead_deletes_only_what_was_due(tmp_path):
    log_dir, bases, _, audit = _setup(tmp_path)
    os.utime(log_dir / f"{bases[0]:020d}.log", (time.time() - 7200, time.time() - 7200))   # due: 2h, read
    stamp = tmp_path / "faketime"
    faketime_env(stamp, "+365d")
    cleaned = _cli(tmp_path, stamp, "clean", "--json")
    assert cleaned.returncode == 0, cleaned.stderr
    assert segment_bases(log_dir) == bases[1:]                # the rest was not due before the step
    files = json.loads(cleaned.stdout)["logs"][0]["files"]
    assert files[0]["action"] == "deleted" and files[1]["reasons"] == ["clock-step"]
    assert "unconsumed:etl" in files[2]["reasons"]
    forced = _cli(tmp_path, stamp, "clean", "--force", "--json")    # forced: young, but never unread
    assert forced.returncode == 0, forced.stderr
    assert segment_bases(log_dir) == bases[2:]
    planned = _cli(tmp_path, stamp, "plan", "--at", "2026-01-01T00:00:00Z", "--json")   # the operator asks
    assert planned.returncode == 0, planned.stderr
    accepted = _cli(tmp_path, stamp, "clock", "accept")
    assert accepted.returncode == 0 and "accepted the wall clock" in accepted.stdout, accepted.stderr
    again = _cli(tmp_path, stamp, "clean", "--json")
    assert again.returncode == 0, again.stderr
    assert segment_bases(log_dir) == bases[-1:]               # accepted: a year on, etl is stale
    events = [e["event"] for e in map(json.loads, open(audit)) if e["event"].startswith("clock-")]
    assert events == ["clock-stepped", "clock-accepted"]


def test_accepting_the_clock_is_a_post_like_clean_that_needs_the_token(tmp_path):
    log_dir, bases, _, _ = _setup(tmp_path)
    path, _ = write_config(tmp_path, config_text(tmp_path, sidecar=True, service={"token": "s3cret"}))
    with Sidecar(path, cwd=tmp_path) as sidecar:
        sidecar.wait_ready(timeout=60)
        status, _, body = sidecar.request("POST", "/clock/accept")
        assert status == 401, body
        assert sidecar.request("GET", "/clock/accept")[0] == 405
        status, _, body = sidecar.request("POST", "/clock/accept", headers={"Authorization": "Bearer s3cret"})
        assert status == 200 and json.loads(body)["clock"]["held"] is False
        done = subprocess.run([sys.executable, "-m", "retention.cli", "clock", "accept", "--url", sidecar.url,
                               "--token", "s3cret"], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and "nothing to accept" in done.stdout, done.stderr
        refused = subprocess.run([sys.executable, "-m", "retention.cli", "clock", "accept", "--url", sidecar.url],
                                 capture_output=True, text=True, timeout=120, env={**os.environ, "RETENTION_TOKEN": ""})
        assert refused.returncode == 1 and "401" in refused.stderr and "Traceback" not in refused.stderr
    assert segment_bases(log_dir) == bases


def test_accept_with_the_configuration_goes_to_the_sidecar_listening_on_it(tmp_path):
    # Without --url the CLI accepted in its own guard: `clock-accepted` written, the running
    # sidecar still holding, and its next record rewrite holding again after a restart.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    _, _, path, audit = _setup(tmp_path, {"listen": f"127.0.0.1:{port}"})
    stamp = tmp_path / "faketime"
    with Sidecar(path, cwd=tmp_path, env=faketime_env(stamp, "+365d", fixed=True)) as sidecar:
        sidecar.wait_for(lambda: clock_problem(sidecar), what="clock-stepped at start")
        accepted = _cli(tmp_path, stamp, "clock", "accept")
        assert accepted.returncode == 0 and "accepted the wall clock" in accepted.stdout, accepted.stderr
        assert clock_problem(sidecar) is None                 # the running sidecar lifted it
    with Sidecar(path, cwd=tmp_path, env=faketime_env(stamp, "+365d", fixed=True)) as sidecar:     # and it stays lifted
        sidecar.wait_ready(timeout=60)
        more_passes(sidecar)
        assert clock_problem(sidecar) is None, sidecar.log()
    assert [e["event"] for e in audit_events(audit, "clock-accepted")] == ["clock-accepted"]


@pytest.mark.parametrize("small_fs", [("tmpfs", 8 << 20)], indirect=True)
def test_a_full_disk_a_year_ahead_is_still_relieved_by_pressure(small_fs, tmp_path):
    # The guard holds time, not pressure: a disk above force_ratio is brought to force_target as
    # without a step (and the audit says what pressure overrode).
    log_dir, audit = os.path.join(small_fs, "log"), str(tmp_path / "audit.jsonl")
    fill_to(log_dir, small_fs, 0.50, segment_size=256 << 10)
    path, _ = write_config(tmp_path, config_text(
        sidecar=True, service={"audit": audit}, log={"path": log_dir, "segment_size": "256KiB"},
        policy={"files_per_pass": 100, "disk_check_interval": "1s",
                "disk": {"clean_ratio": 0.25, "force_ratio": 0.45, "force_target": 0.30, "refuse_writes_ratio": 0.60}}))
    with Sidecar(path, cwd=tmp_path, env=faketime_env(tmp_path / "faketime", "+365d", fixed=True)) as sidecar:
        sidecar.wait_for(lambda: clock_problem(sidecar), what="clock-stepped at start")
        sidecar.wait_for(lambda: disk_usage(small_fs).used_ratio <= 0.30, timeout=60, what="down to force_target")
        assert clock_problem(sidecar)                 # still held: only pressure deleted
    deleted = audit_events(audit, "deleted")
    assert deleted and all(e["overridden_by"] == "disk-force" for e in deleted)
