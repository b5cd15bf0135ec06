"""The `commitlog` command on a log another process is writing: dump --follow sees new records
and stops cleanly (SIGINT, SIGTERM, its reader gone); a reset or delete is refused while the
writer holds the log, and --force does it; verify passes while records are appended."""

from __future__ import annotations

import json
import signal
import subprocess

import pytest

from commitlog import CommitLog

from tool_helpers import Writer, make_log, one_line, popen_tool, run_tool


@pytest.fixture
def writer(tmp_path):
    make_log(tmp_path / "app", records=40)
    w = Writer(tmp_path / "app")
    yield w
    w.close()


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_dump_follow_prints_what_a_writer_appends_and_stops_cleanly_on_a_signal(tmp_path, writer, stop):
    proc = popen_tool("dump", tmp_path / "app", "--from", "38", "--follow", stdout=subprocess.PIPE,
                      stderr=subprocess.PIPE)
    try:
        assert [json.loads(proc.stdout.readline())["offset"] for _ in range(2)] == [38, 39]
        assert writer.append(3) == 43
        new = [json.loads(proc.stdout.readline()) for _ in range(3)]
        assert [(r["offset"], r["value"]) for r in new] == [(40, "new-0"), (41, "new-1"), (42, "new-2")]
        proc.send_signal(stop)
        assert proc.wait(timeout=30) == 0
        assert proc.stderr.read() == ""
    finally:
        proc.kill()
        proc.wait()


def test_dump_follow_ends_when_its_reader_goes_even_while_no_record_comes(tmp_path, writer):
    proc = popen_tool("dump", tmp_path / "app", "--follow", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert json.loads(proc.stdout.readline())["offset"] == 0
        proc.stdout.close()                # as `head -1` does
        assert proc.wait(timeout=30) == 0
        assert "Traceback" not in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()


def test_a_reset_or_delete_is_refused_while_a_writer_holds_the_log_and_done_with_force(tmp_path, writer):
    path = tmp_path / "app"
    for args in (("--reset", "billing", "--to", "earliest"), ("--delete", "audit")):
        out = run_tool("groups", path, *args)
        assert out.returncode == 1 and out.stdout == ""
        line = one_line(out.stderr)
        assert f"open for writing by process {writer.proc.pid}" in line and "--force" in line
    with CommitLog.open(path, readonly=True) as log:
        assert log.committed() == {"billing": 40, "audit": 7}
    out = run_tool("groups", path, "--reset", "billing", "--to", "earliest", "--force")
    assert out.returncode == 0, out.stderr
    assert "committed offset 40 -> 0" in out.stdout and f"forced while process {writer.proc.pid}" in out.stdout
    assert run_tool("groups", path, "--delete", "audit", "--force").returncode == 0
    assert writer.append(2) == 42          # the writer goes on: the reset held its lock only briefly
    with CommitLog.open(path, readonly=True) as log:
        assert log.committed() == {"billing": 0}


def test_verify_and_segments_pass_while_a_writer_appends(tmp_path, writer):
    path = tmp_path / "app"
    for _ in range(3):
        end = writer.append(150)
        out = run_tool("verify", path)
        assert out.returncode == 0, out.stdout + out.stderr
        rows = json.loads(run_tool("segments", path, "--json").stdout)["segments"]
        assert rows[-1]["state"] == "active" and rows[-1]["end_offset"] == end
