"""`retention status` as a newcomer meets it: `--wait` for a sidecar just started, the archive tier
in the text, the lag note only beside consumer groups, a malformed --url as one line; and every
text output of the CLI ending in a newline."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

from retention_helpers import config_text, make_log, write_config
from sidecar_helpers import Sidecar


def retention(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "retention.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def test_status_wait_answers_once_a_sidecar_just_started_is_ready(tmp_path):
    make_log(tmp_path / "staging", 3)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config, _ = write_config(tmp_path, config_text(tmp_path, sidecar=True, service={"listen": f"127.0.0.1:{port}"}))
    server = subprocess.Popen([sys.executable, "-m", "retention.cli", "serve", "--config", str(config)],
                              cwd=tmp_path, start_new_session=True, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        done = retention("status", "--url", f"127.0.0.1:{port}", "--wait", "60", cwd=tmp_path)   # no sleep before
        assert done.returncode == 0, done.stderr
        assert ", ready;" in done.stdout.splitlines()[0] and "last pass" in done.stdout
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(30)


def test_status_wait_on_nothing_listening_is_one_line_and_exit_3(tmp_path):
    done = retention("status", "--url", "127.0.0.1:9", "--wait", "0.5", cwd=tmp_path)
    assert done.returncode == 3
    assert len(done.stderr.splitlines()) == 1 and "asked for 0.5s" in done.stderr, done.stderr
    bad = retention("status", "--url", "127.0.0.1:9", "--wait", "soon", cwd=tmp_path)
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1 and "--wait" in bad.stderr


def test_an_unclosed_ipv6_bracket_in_url_is_one_line_and_exit_2(tmp_path):
    for command in (["status"], ["plan"]):
        done = retention(*command, "--url", "http://[::1", cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.splitlines()) == 1 and "--url" in done.stderr and "Traceback" not in done.stderr


def test_status_text_shows_the_archive_tier_and_no_lag_note_without_groups(tmp_path):
    make_log(tmp_path / "staging", 3)
    archive = f"file://{tmp_path}/archive"
    config, _ = write_config(tmp_path, config_text(tmp_path, sidecar=True, policy={"archive": {"url": archive}}))
    with Sidecar(config, cwd=tmp_path) as sidecar:
        sidecar.wait_ready()
        done = retention("status", "--url", sidecar.url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    line = next((line for line in done.stdout.splitlines() if line.startswith("  archive ")), None)
    assert line is not None and archive in line and "upload lag" in line, done.stdout
    assert "consumer " not in done.stdout and "lag_bytes" not in done.stdout     # no groups, no note


def test_archive_and_offsets_text_end_in_a_newline(tmp_path):
    make_log(tmp_path / "staging", 3)
    config, _ = write_config(tmp_path, config_text(tmp_path, policy={"archive": {"url": f"file://{tmp_path}/a"}}))
    for args in (["archive", "status"], ["offsets", "--at", "2000-01-01T00:00:00Z"]):
        done = retention(*args, "--config", str(config), cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stdout.endswith("\n") and not done.stdout.endswith("\n\n"), (args, done.stdout[-80:])
