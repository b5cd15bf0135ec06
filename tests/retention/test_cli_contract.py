"""The command line's contract for a newcomer: every subcommand and option explained, one exit-code
table, `--url` taking HOST:PORT and answering `plan`, `clean`, `compact`, `offsets` from a running
sidecar with the JSON its HTTP API gives, every output naming its configuration, never `None`."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from commitlog import CommitLog
from retention.cli import EXIT_CODES, build_parser

from retention_helpers import config_text, make_log, set_age, write_config
from sidecar_helpers import Sidecar

TOKEN = "cli-token"


def retention(*args: str, cwd, env: dict | None = None) -> subprocess.CompletedProcess:
    import os
    return subprocess.run([sys.executable, "-m", "retention.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli")
    log_dir = tmp / "staging"
    bases = make_log(log_dir, 6)
    set_age(log_dir, bases[:4], 7200)
    with CommitLog.open(log_dir, readonly=True) as log:
        log.commit("etl", bases[5])
    text = config_text(tmp, sidecar=True, log={"path": str(log_dir)}, service={"token": TOKEN},
                       policy={"files_per_pass": 2, "reserve": "1h"})
    config_path, _ = write_config(tmp, text)
    with Sidecar(config_path, cwd=tmp) as s:
        s.wait_ready()
        s.tmp, s.bases = tmp, bases
        yield s


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_subcommand_has_a_description_and_every_option_a_help():
    commands = _subcommands()
    assert set(commands) == {"serve", "plan", "clean", "compact", "offsets", "check", "status", "archive", "clock"}
    for name, sub in commands.items():
        assert sub.description and len(sub.description) > 30, name
        for action in sub._actions:
            assert action.help and action.help != argparse.SUPPRESS, (name, action.dest)
    printing = {name for name in commands if name != "serve"}
    for name in printing:   # every subcommand that prints has --json
        assert any("--json" in a.option_strings for a in commands[name]._actions), name


def test_the_exit_codes_are_one_table_and_the_help_lists_them(tmp_path):
    assert sorted(EXIT_CODES) == [0, 1, 2, 3]
    helped = retention("--help", cwd=tmp_path)
    assert helped.returncode == 0
    for code in EXIT_CODES:
        assert f"{code} " in helped.stdout.split("Exit status:")[1]


def test_status_takes_host_port_and_says_the_configuration(sidecar):
    host_port = sidecar.url.removeprefix("http://")
    result = retention("status", "--url", host_port, cwd=sidecar.tmp)
    assert result.returncode == 0, result.stderr
    assert "None" not in result.stdout and "log staging" in result.stdout
    assert "offsets 0 to" in result.stdout
    status = json.loads(retention("status", "--url", host_port, "--json", cwd=sidecar.tmp).stdout)
    assert status["config"] == str(sidecar.config_path)


def test_status_of_a_sidecar_that_is_down_is_json_with_json_and_exits_3(tmp_path):
    result = retention("status", "--url", "127.0.0.1:9", "--json", cwd=tmp_path)
    assert result.returncode == 3
    answer = json.loads(result.stdout)
    assert answer["reachable"] is False and "cannot reach" in answer["error"]
    assert len(result.stderr.strip().splitlines()) == 1
    for command in ("plan", "compact"):
        assert retention(command, "--url", "127.0.0.1:9", cwd=tmp_path).returncode == 3


def test_bad_urls_and_mixed_sources_are_usage_errors_that_name_the_option(tmp_path, sidecar):
    for url in ("ftp://host:1", "host:notaport", "http://"):
        result = retention("status", "--url", url, cwd=tmp_path)
        assert result.returncode == 2 and "--url" in result.stderr, (url, result.stderr)
    both = retention("plan", "--url", sidecar.url, "--config", str(sidecar.config_path), cwd=tmp_path)
    assert both.returncode == 2 and "--config or --url" in both.stderr
    at = retention("plan", "--url", sidecar.url, "--at", "2026-01-01T00:00:00", cwd=tmp_path)
    assert at.returncode == 2 and "--at" in at.stderr


def test_plan_from_the_sidecar_is_its_http_json_and_names_its_configuration(sidecar):
    result = retention("plan", "--url", sidecar.url.removeprefix("http://"), "--json", cwd=sidecar.tmp)
    assert result.returncode == 0, result.stderr
    from_cli = json.loads(result.stdout)
    _, from_http = sidecar.get_json("/plan")
    assert set(from_cli) == set(from_http) == {"at", "config", "kind", "logs"}
    assert from_cli["config"] == from_http["config"] == str(sidecar.config_path)
    strip = lambda plan: [{k: v for k, v in f.items() if k != "details"} for f in plan["logs"][0]["files"]]
    assert strip(from_cli) == strip(from_http)
    text = retention("plan", "--url", sidecar.url, cwd=sidecar.tmp)
    assert text.stdout.splitlines()[0] == f"configuration: {sidecar.config_path}"
    assert "None" not in text.stdout


def test_clean_and_compact_through_the_sidecar_need_its_token(sidecar):
    refused = retention("clean", "--url", sidecar.url, cwd=sidecar.tmp)
    assert refused.returncode == 1 and "401" in refused.stderr
    dry = retention("compact", "--url", sidecar.url, "--dry-run", "--json", cwd=sidecar.tmp,
                    env={"RETENTION_TOKEN": TOKEN})
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["dry_run"] is True
    done = retention("clean", "--url", sidecar.url, "--token", TOKEN, "--json", cwd=sidecar.tmp)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["kind"] == "pass" and answer["config"] == str(sidecar.config_path)
    assert answer["logs"][0]["deleted"] == 2      # files_per_pass of the four expired
    text = retention("clean", "--url", sidecar.url, "--token", TOKEN, cwd=sidecar.tmp)
    assert text.returncode == 0 and text.stdout.startswith("configuration: ") and "None" not in text.stdout
    # The sidecar's manual trigger stays open for manual_passes (20) passes, as the help says: the
    # first ran now, 19 are left for its next intervals.
    _, status = sidecar.get_json("/status")
    assert status["logs"][0]["manual_passes_left"] == 19


def test_offsets_through_the_sidecar(sidecar):
    result = retention("offsets", "--url", sidecar.url, "--at", "2000-01-01T00:00:00Z", "--json", cwd=sidecar.tmp)
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["config"] == str(sidecar.config_path) and "staging" in answer["logs"]
    unknown = retention("offsets", "--url", sidecar.url, "--at", "2000-01-01T00:00:00Z", "--log", "nope",
                        cwd=sidecar.tmp)
    assert unknown.returncode == 2 and "nope" in unknown.stderr


def test_a_log_not_created_yet_is_the_same_answer_from_plan_and_clean(tmp_path):
    path, _ = write_config(tmp_path, "logs:\n  later:\n    path: later\n")
    for command in ("plan", "clean"):
        result = retention(command, "--config", str(path), cwd=tmp_path)
        assert result.returncode == 0, (command, result.stderr)
        assert result.stdout.splitlines()[0] == f"configuration: {path}"
        assert "not a commit log yet" in result.stdout and "None" not in result.stdout
        answer = json.loads(retention(command, "--config", str(path), "--json", cwd=tmp_path).stdout)
        assert answer["logs"][0]["not_created"] is True and "error" not in answer["logs"][0]
    assert not (tmp_path / "later").exists()


def test_without_config_the_output_says_it_used_the_embedded_default(tmp_path):
    result = retention("plan", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].startswith("configuration: embedded default")
    assert json.loads(retention("plan", "--json", cwd=tmp_path).stdout)["config"].startswith("embedded default")


def test_a_sidecar_that_hangs_up_mid_answer_is_one_line_and_exit_3(tmp_path):
    """A server on loopback that promises 1,000 bytes of JSON, sends 10 and closes; another that
    closes before answering; another that answers garbage."""
    import socket
    import threading

    answers = [b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"service\"",
               b"", b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nnot json!"]
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]

    def serve():
        for answer in answers:
            conn, _ = server.accept()
            conn.recv(65536)
            conn.sendall(answer)
            conn.close()
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        for _ in answers:
            result = retention("status", "--url", f"127.0.0.1:{port}", cwd=tmp_path)
            assert result.returncode == 3, result.stderr
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1 and "cannot reach the sidecar" in lines[0], result.stderr
    finally:
        thread.join(10)
        server.close()
