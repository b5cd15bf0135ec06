"""Signals of a real `retention serve` process: SIGHUP reloads (or keeps the old configuration),
SIGTERM/SIGINT stop within pause_between_files + 1 s with status 0 and a consistent log; systemd's
notify protocol."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from commitlog import CommitLog
from retention import read_audit

from kubernetes_helpers import probe_path
from retention_helpers import config_text, make_log, segment_bases, set_age, write_config
from sidecar_helpers import Sidecar



def _config(tmp, *, interval="1h", hours=(), pause="0ms", level="INFO", **service) -> str:
    return config_text(tmp, sidecar=True, service={"log_level": level, **service},
                       policy={"interval": interval, "delete_at_hours": list(hours), "pause_between_files": pause})


def _interval(s: Sidecar) -> float:
    return s.get_json("/status")[1]["policies"]["default"]["interval_seconds"]


def test_sighup_with_a_valid_file_applies_interval_and_log_level_without_a_restart(tmp_path):
    make_log(tmp_path / "staging", 2)
    config_path, _ = write_config(tmp_path, _config(tmp_path, interval="1h"))
    with Sidecar(config_path, cwd=tmp_path) as s:
        s.wait_ready()
        pid = s.proc.pid
        assert _interval(s) == 3600
        assert "| TRACE   |" not in s.log()
        config_path.write_text(_config(tmp_path, interval="7s", level="TRACE"))
        s.send(signal.SIGHUP)
        s.wait_for(lambda: _interval(s) == 7, what="interval 7s in /status")
        jobs = {j["id"]: j for j in s.get_json("/status")[1]["jobs"]}
        assert jobs["cleanup:default"]["interval_seconds"] == 7
        s.get_json("/plan")                                   # planning logs each decision at TRACE
        s.wait_for(lambda: "| TRACE   |" in s.log(), what="TRACE decision lines")
        assert s.proc.pid == pid and s.proc.poll() is None
        assert s.request("GET", "/healthz")[0] == 200
        metrics = s.request("GET", "/metrics")[2].decode()
        assert 'retention_config_reloads_total{result="ok"} 1.0' in metrics
        assert 'retention_policy_interval_seconds{policy="default"} 7.0' in metrics
        assert s.stop() == 0


def test_sighup_applies_http_timeout_to_open_connections_and_max_connections_to_the_next_accept(tmp_path):
    make_log(tmp_path / "staging", 2)

    def config(timeout: str, connections: int) -> str:
        return _config(tmp_path, http_timeout=timeout, max_connections=connections)

    def reload(text: str, count: int) -> None:
        config_path.write_text(text)
        s.send(signal.SIGHUP)
        s.wait_for(lambda: s.log().count("reload: HTTP http_timeout") == count, what=f"reload {count}")

    config_path, _ = write_config(tmp_path, config("1h", 100))
    with Sidecar(config_path, cwd=tmp_path) as s:
        s.wait_ready()
        address = (s.url.split("//")[1].rsplit(":", 1)[0], int(s.url.rsplit(":", 1)[1]))
        idle = [socket.create_connection(address, timeout=5) for _ in range(3)]
        time.sleep(1.5)
        for sock in idle:                                   # a 1 h timeout closes nothing yet
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(1)
            sock.setblocking(True)
        reload(config("1s", 100), 1)
        started = time.monotonic()
        for sock in idle:                                   # already idle past the new 1 s: closed
            assert sock.recv(1) == b""
            sock.close()
        assert time.monotonic() - started < 3.0

        reload(config("1h", 3), 2)
        held = [socket.create_connection(address, timeout=5) for _ in range(3)]
        time.sleep(0.5)                                     # accepted: the limit is reached
        # at the limit, the next connection closes the longest-idle one to be served at once
        extra = socket.create_connection(address, timeout=5)
        extra.sendall(b"GET /healthz HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (address[0].encode(), address[1]))
        assert extra.recv(64).startswith(b"HTTP/1.1 200")
        extra.close()
        assert held[0].recv(1) == b""                       # the first held, the longest idle
        for sock in held[1:]:                               # the others are still open
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(1)
        for sock in held:
            sock.close()
        assert s.proc.poll() is None
        assert s.stop() == 0


def test_sighup_with_an_invalid_file_keeps_running_on_the_old_configuration(tmp_path):
    make_log(tmp_path / "staging", 2)
    config_path, _ = write_config(tmp_path, _config(tmp_path, interval="1h"))
    with Sidecar(config_path, cwd=tmp_path) as s:
        s.wait_ready()
        config_path.write_text(_config(tmp_path, interval="-5s"))
        s.send(signal.SIGHUP)
        s.wait_for(lambda: "reload (SIGHUP) failed" in s.log(), what="the reload error line")
        errors = [line for line in s.log().splitlines() if "reload (SIGHUP) failed" in line]
        assert len(errors) == 1                                # one clear line ...
        assert "retention.yaml:" in errors[0] and "policies.default.interval" in errors[0]  # file, key
        assert "still running the previous configuration" in errors[0]
        assert s.proc.poll() is None
        # An older configuration runs and cleans: a warning, listed with why, until a good reload;
        # no probe fails on it (a restart would fail to start on the same file: a crash loop).
        status, body = s.get_json("/healthz")
        assert status == 200 and body["status"] == "warning" and body["problems"] == []
        assert [(d["problem"], d["severity"]) for d in body["details"]] == [("reload-failed", "warning")]
        assert "policies.default.interval" in body["details"][0]["message"] and body["warnings"]
        for probe in ("livenessProbe", "startupProbe"):        # as the Kubernetes manifest asks
            assert s.get_json(probe_path(probe)) == (200, {"status": "ok", "problems": [], "details": []})
        assert s.get_json("/readyz")[0] == 200
        view = s.get_json("/status")[1]
        assert view["health"]["reload_error"] and view["healthy"] is True
        assert view["problems"] == [] and view["warnings"][0].startswith("reload-failed: ")
        assert _interval(s) == 3600
        metrics = s.request("GET", "/metrics")[2].decode()
        assert 'retention_config_reloads_total{result="error"} 1.0' in metrics
        assert 'retention_health_problems{problem="reload-failed"} 1.0' in metrics
        assert "retention_config_last_reload_successful 0.0" in metrics
        config_path.write_text("this: [is not yaml")
        s.send(signal.SIGHUP)
        s.wait_for(lambda: s.log().count("reload (SIGHUP) failed") == 2, what="the second error")
        assert s.proc.poll() is None and _interval(s) == 3600
        assert s.get_json("/healthz")[1]["status"] == "warning"
        assert s.log().count("problem started: reload-failed") == 1     # one line when it starts
        config_path.write_text(_config(tmp_path, interval="1h"))
        s.send(signal.SIGHUP)
        s.wait_for(lambda: s.get_json("/healthz")[1]["status"] == "ok", what="no warning after a good reload")
        s.wait_for(lambda: "problem cleared: reload-failed" in s.log(), what="the cleared line")
        assert "retention_config_last_reload_successful 1.0" in s.request("GET", "/metrics")[2].decode()
        assert s.stop() == 0


def test_sigterm_during_a_pass_with_a_long_pause_exits_0_in_time_and_leaves_a_consistent_log(tmp_path):
    log_dir = tmp_path / "staging"
    bases = make_log(log_dir, 8)
    set_age(log_dir, bases[:-1], 7200)
    pause = 5.0
    config_path, config = write_config(tmp_path, _config(tmp_path, hours=list(range(24)), pause="5s"))
    s = Sidecar(config_path, cwd=tmp_path).start()
    try:
        # The first pass starts at once: one deletion, then a 5 s pause before the next.
        s.wait_for(lambda: len(segment_bases(log_dir)) < len(bases), timeout=20, interval=0.02,
                   what="the first deletion")
        time.sleep(0.3)
        started = time.monotonic()
        s.send(signal.SIGTERM)
        rc = s.wait(timeout=pause + 5)
        took = time.monotonic() - started
    finally:
        s.stop()
    assert rc == 0, s.log()
    assert took < pause + 1, took
    assert "received SIGTERM" in s.log()
    remaining = segment_bases(log_dir)
    gone = bases[: len(bases) - len(remaining)]
    assert gone and remaining == bases[len(gone):]            # oldest first, no hole, pass cut short
    assert len(gone) < len(bases) - 1
    assert [e["base_offset"] for e in read_audit(str(tmp_path / "audit.jsonl"))] == gone
    with CommitLog.open(log_dir, readonly=True) as log:
        assert log.start_offset == remaining[0] == log.segments()[0].base_offset
        assert log.read(log.start_offset).offset == log.start_offset
    # The next pass (here `retention clean`, without the pause) leaves no .deleted file behind.
    quick, _ = write_config(tmp_path, _config(tmp_path, hours=list(range(24))), name="quick.yaml")
    subprocess.run([sys.executable, "-m", "retention.cli", "clean", "--config", str(quick)],
                   cwd=tmp_path, capture_output=True, timeout=60, check=True)
    assert not list(log_dir.glob("*.deleted"))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_idle_service_stops_on_signal_with_status_0(tmp_path, sig):
    make_log(tmp_path / "staging", 1)
    config_path, _ = write_config(tmp_path, _config(tmp_path))
    s = Sidecar(config_path, cwd=tmp_path).start()
    s.wait_ready()
    started = time.monotonic()
    s.send(sig)
    assert s.wait(timeout=10) == 0
    assert time.monotonic() - started < 1.5
    s.stop()


def test_systemd_notify_ready_reloading_watchdog_stopping(tmp_path):
    make_log(tmp_path / "staging", 1)
    config_path, _ = write_config(tmp_path, _config(tmp_path))
    sock_path = str(tmp_path / "notify.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(sock_path)
    server.settimeout(10)
    messages: list[str] = []

    def until(prefix: str) -> str:
        while True:
            message = server.recv(4096).decode()
            messages.append(message)
            if message.startswith(prefix):
                return message

    env = {"NOTIFY_SOCKET": sock_path, "WATCHDOG_USEC": "400000"}   # ping every 0.2 s
    with Sidecar(config_path, cwd=tmp_path, env=env) as s:
        assert until("READY=1").startswith("READY=1\nSTATUS=serving on http://127.0.0.1:")
        until("WATCHDOG=1")
        until("WATCHDOG=1")
        s.send(signal.SIGHUP)
        reloading = until("RELOADING=1")
        usec = int(re.search(r"MONOTONIC_USEC=(\d+)", reloading).group(1))
        assert abs(usec / 1e6 - time.clock_gettime(time.CLOCK_MONOTONIC)) < 10
        until("READY=1")
        s.send(signal.SIGTERM)
        until("STOPPING=1")
        assert s.wait(timeout=10) == 0
    server.close()
    assert os.path.exists(sock_path)


def test_a_reload_that_interrupts_a_pass_runs_the_rest_of_its_work_at_once(tmp_path):
    # Before: the interrupted pass's remaining expired segments waited for the next interval
    # (an hour here); now a resumed pass on the new configuration deletes them at once.
    hours = range(24)
    bases = make_log(tmp_path / "staging", 8)
    set_age(tmp_path / "staging", bases[:-1], 7200)
    path, _ = write_config(tmp_path, _config(tmp_path, hours=hours, pause="1500ms"))
    with Sidecar(path, cwd=tmp_path) as s:
        s.wait_for(lambda: len(read_audit(str(tmp_path / "audit.jsonl"))) >= 1, what="the first deletion")
        s.send(signal.SIGHUP)                       # the same file: the pass is cut short anyway
        s.wait_for(lambda: "reload (SIGHUP): applied" in s.log(), what="the reload")
        s.wait_for(lambda: len(read_audit(str(tmp_path / "audit.jsonl"))) == 8, timeout=30,
                   what="every expired segment deleted without waiting an interval")
        assert "resum" in s.log(), s.log()
    assert segment_bases(tmp_path / "staging") == bases[-1:]
