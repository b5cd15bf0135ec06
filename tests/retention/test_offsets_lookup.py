"""Lookup by time over the configured logs: `retention offsets --at` (a real process) and
`GET /offsets?at=` (a real sidecar on loopback)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import quote

from commitlog import CommitLog

from retention_helpers import config_text, write_config
from sidecar_helpers import Sidecar

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=timezone.utc)
T0_MS = int(T0.timestamp() * 1000)


def _stamped_log(path: Path, records: int = 400) -> None:
    """One record per second from T0, in 4 KiB segments."""
    with CommitLog.open(path, segment_size=4096) as log:
        for i in range(records):
            log.append(b"v" * 90, timestamp_ms=T0_MS + i * 1000)


def _config(tmp: Path) -> Path:
    _stamped_log(tmp / "staging")
    _stamped_log(tmp / "clicks", 50)
    logs = {name: {"path": str(tmp / name), "segment_size": "4KiB"} for name in ("staging", "clicks", "gone")}
    return write_config(tmp, config_text(tmp, sidecar=True, logs=logs))[0]


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "retention.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60)


def test_the_command_gives_each_logs_first_offset_at_or_after_the_time(tmp_path):
    config = _config(tmp_path)
    done = run("offsets", "--config", str(config), "--at", "2026-11-20T12:02:30+00:00", "--json",
               "--log", "staging", "--log", "clicks", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["timestamp_ms"] == T0_MS + 150_000
    assert answer["logs"]["staging"] == {"offset": 150, "start_offset": 0, "end_offset": 400}
    assert answer["logs"]["clicks"] == {"offset": None, "start_offset": 0, "end_offset": 50}  # ends 12:00:49
    text = run("offsets", "--config", str(config), "--at", "2026-11-20T13:02:30+01:00", "--log", "staging",
               cwd=tmp_path)
    assert text.returncode == 0 and "staging: offset 150 (kept 0..400)" in text.stdout


def test_a_log_that_cannot_be_opened_is_named_and_the_others_still_answer(tmp_path):
    config = _config(tmp_path)              # "gone" was never created
    done = run("offsets", "--config", str(config), "--at", "2026-11-20T12:00:00Z", cwd=tmp_path)
    assert done.returncode == 1
    assert "staging: offset 0" in done.stdout and "gone: error:" in done.stdout


def test_a_bad_time_or_an_unknown_log_is_one_line_and_exit_2(tmp_path):
    config = _config(tmp_path)
    before = sorted(os.listdir(tmp_path / "staging"))
    for args, says in ((["--at", "yesterday"], "--at: expected an ISO 8601 time"),
                       (["--at", "2026-11-20T12:00:00Z", "--log", "nope"], "no log named 'nope'")):
        done = run("offsets", "--config", str(config), *args, cwd=tmp_path)
        assert done.returncode == 2 and done.stdout == ""
        assert len(done.stderr.strip().splitlines()) == 1 and says in done.stderr, done.stderr
    assert sorted(os.listdir(tmp_path / "staging")) == before


def test_the_sidecar_answers_offsets_at_a_time_and_refuses_bad_queries(tmp_path):
    config = _config(tmp_path)
    with Sidecar(config, cwd=tmp_path) as sidecar:
        sidecar.wait_ready()
        code, body = sidecar.get_json("/offsets?at=" + quote("2026-11-20T12:01:00+00:00") + "&log=staging")
        assert code == 200 and body["logs"] == {"staging": {"offset": 60, "start_offset": 0, "end_offset": 400}}
        code, body = sidecar.get_json("/offsets?at=" + quote("2026-11-20T12:00:10+00:00"))
        assert code == 200 and body["logs"]["clicks"]["offset"] == 10 and "error" in body["logs"]["gone"]
        for query, says in (("", "needs one at=TIME"), ("?at=noon", "at: expected an ISO 8601 time"),
                            ("?at=2026-11-20T12:00:00Z&log=nope", "no log named 'nope'"),
                            ("?at=2026-11-20T12:00:00Z&bogus=1", "takes at and log")):
            code, body = sidecar.get_json("/offsets" + query)
            assert code == 400 and says in body["error"], (query, body)
