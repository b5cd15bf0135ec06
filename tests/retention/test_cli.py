"""The `retention` command line: exit statuses, one-line errors, plan output, safety."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from retention.cli import main
from retention_helpers import make_log, segment_bases, set_age, write_config

BAD_CONFIGS = sorted((Path(__file__).parent.parent / "policies" / "bad_configs").glob("*.yaml"))


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "retention.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60)


def test_there_are_at_least_fifteen_bad_configuration_files():
    assert len(BAD_CONFIGS) >= 15


@pytest.mark.parametrize("bad", BAD_CONFIGS, ids=lambda p: p.stem)
def test_bad_configuration_exits_2_with_one_line_naming_file_and_key(bad, tmp_path, monkeypatch, capsys):
    expect = bad.read_text().splitlines()[0].removeprefix("# expect:").strip()
    monkeypatch.chdir(tmp_path)
    for command in ("check", "plan", "clean"):
        assert main([command, "--config", str(bad)]) == 2, command
        out, err = capsys.readouterr()
        lines = err.strip().splitlines()
        assert len(lines) == 1, lines
        assert bad.name in lines[0] and expect in lines[0], lines[0]
        assert out == ""
    assert os.listdir(tmp_path) == []        # nothing was created or changed


@pytest.mark.parametrize("bad", BAD_CONFIGS[:3], ids=lambda p: p.stem)
def test_bad_configuration_exit_status_of_the_real_process(bad, tmp_path):
    result = run("check", "--config", str(bad), cwd=tmp_path)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and bad.name in result.stderr


def test_check_accepts_the_embedded_default_and_the_shipped_examples(tmp_path):
    result = run("check", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for example in sorted((Path(__file__).parents[2] / "conf").glob("*.yaml")):
        result = run("check", "--config", str(example), cwd=tmp_path)
        assert result.returncode == 0, (example, result.stderr)


def test_unknown_command_or_option_exits_2(tmp_path):
    assert run("bogus", cwd=tmp_path).returncode == 2
    assert run("plan", "--bogus", cwd=tmp_path).returncode == 2
    bad_at = run("plan", "--at", "yesterday-ish", cwd=tmp_path)
    assert bad_at.returncode == 2 and "--at" in bad_at.stderr


CONFIG = """
service:
  audit: audit.jsonl
logs:
  staging:
    path: staging
    segment_size: 4KiB
policies:
  default:
    delete_at_hours: [4]
    timezone: UTC
    reserve: 1h
    files_per_pass: 10
    pause_between_files: 0ms
"""


def test_plan_prints_a_table_and_json_and_at_is_a_what_if_clock(tmp_path):
    bases = make_log(tmp_path / "staging", 3)
    set_age(tmp_path / "staging", bases[:2], 3 * 3600)
    config_path, _ = write_config(tmp_path, CONFIG)
    table = run("plan", "--config", str(config_path), cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    assert "SEGMENT" in table.stdout and f"{bases[0]:020d}.log" in table.stdout
    at = run("plan", "--config", str(config_path), "--json", "--at", "2099-01-02T04:15:00+00:00", cwd=tmp_path)
    data = json.loads(at.stdout)
    assert data["at"].startswith("2099-01-02T04:15")
    log = data["logs"][0]
    assert log["triggers"] == ["time-window"]
    assert [f["action"] for f in log["files"]] == ["delete", "delete", "delete", "keep"]
    assert segment_bases(tmp_path / "staging") == bases    # planning deletes nothing


def test_clean_force_deletes_young_segments_and_reports_json(tmp_path):
    bases = make_log(tmp_path / "staging", 3)
    config_path, _ = write_config(tmp_path, CONFIG)
    plain = json.loads(run("clean", "--config", str(config_path), "--json", cwd=tmp_path).stdout)
    assert plain["logs"][0]["deleted"] == 0
    forced = run("clean", "--config", str(config_path), "--json", "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    data = json.loads(forced.stdout)
    assert data["logs"][0]["deleted"] == 3
    assert [f["action"] for f in data["logs"][0]["files"]] == ["deleted"] * 3 + ["keep"]
    assert segment_bases(tmp_path / "staging") == bases[3:]


def test_a_one_shot_clean_is_one_pass_and_says_so(tmp_path):
    """`retention clean --config` runs exactly the one pass its help promises: it deletes what has
    expired outside delete_at_hours, and its reasons name that pass as the request's last, never
    "N passes of it left" (there is no later pass in a process that exits)."""
    bases = make_log(tmp_path / "staging", 3)
    set_age(tmp_path / "staging", bases[:2], 3 * 3600)
    config_path, _ = write_config(tmp_path, CONFIG.replace("delete_at_hours: [4]", "delete_at_hours: []"))
    text = run("clean", "--config", str(config_path), cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert "its last pass" in text.stdout and "of it left" not in text.stdout and "after this one" not in text.stdout
    assert segment_bases(tmp_path / "staging") == bases[2:]
    help_text = run("clean", "--help", cwd=tmp_path).stdout
    assert "one cleanup pass" in help_text and "manual_passes" in help_text   # and what --url opens


def test_never_deletes_anything_that_is_not_a_segment_of_the_log(tmp_path):
    log_dir = tmp_path / "staging"
    bases = make_log(log_dir, 4)
    set_age(log_dir, bases, 3 * 3600)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "00000000000000000000.log").write_bytes(b"o" * 4096)
    planted = {
        log_dir / "notes.txt": "file",
        log_dir / "00000000000000000002.log": "dir",           # a subdirectory posing as one
        tmp_path / "00000000000000000000.log": "file",         # a ../ neighbour of the log
    }
    for path, kind in planted.items():
        if kind == "file":
            path.write_bytes(b"f" * 4096)
        else:
            path.mkdir()
    config_path, _ = write_config(tmp_path, CONFIG.replace("path: staging", "path: ./staging/../staging"))
    for _ in range(3):
        result = run("clean", "--config", str(config_path), "--force", "--json", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
    assert segment_bases(log_dir) == bases[-1:]
    for path, kind in planted.items():   # a symlink posing as a segment stops deletion in the
        assert path.exists(), path        # log instead: tests/adversary/test_symlinks_segments.py
    assert (outside / "00000000000000000000.log").read_bytes() == b"o" * 4096


def test_a_segment_named_file_of_the_wrong_size_stops_deletion_in_that_log(tmp_path):
    log_dir = tmp_path / "staging"
    bases = make_log(log_dir, 4)
    set_age(log_dir, bases, 3 * 3600)
    wrong = log_dir / f"{bases[1] + 1:020d}.log"
    wrong.write_bytes(b"w" * 100)
    config_path, _ = write_config(tmp_path, CONFIG)
    result = run("clean", "--config", str(config_path), "--force", "--json", cwd=tmp_path)
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert wrong.name in data["logs"][0]["error"] and "100 bytes" in data["logs"][0]["error"]
    assert segment_bases(log_dir) == sorted(bases + [bases[1] + 1])
    assert wrong.read_bytes() == b"w" * 100


def test_version_prints_the_distributions_version_and_exits_0(tmp_path):
    from importlib.metadata import version
    result = run("--version", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"retention {version('commitlog-retention')}"


def test_check_counts_the_policies_the_file_defines_not_the_implicit_default(tmp_path):
    two = write_config(tmp_path, """
logs:
  a: {path: a, policy: hourly}
  b: {path: b, policy: nightly}
policies:
  hourly: {}
  nightly: {}
""")[0]
    result = run("check", "--config", str(two), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{two}: ok (2 logs, 2 policies)" and result.stderr == ""
    with_default = write_config(tmp_path, "logs:\n  a: {path: a}\npolicies:\n  default: {}\n", "own.yaml")[0]
    assert run("check", "--config", str(with_default), cwd=tmp_path).stdout.strip() == \
        f"{with_default}: ok (1 log, 1 policy)"
    implicit = write_config(tmp_path, "logs:\n  a: {path: a}\n", "implicit.yaml")[0]
    assert run("check", "--config", str(implicit), cwd=tmp_path).stdout.strip() == \
        f"{implicit}: ok (1 log, 0 policies; the built-in default policy looks after 1)"


def test_check_warns_that_a_file_without_logs_cleans_nothing(tmp_path):
    empty = write_config(tmp_path, "logs: {}\n")[0]
    result = run("check", "--config", str(empty), cwd=tmp_path)
    assert result.returncode == 0
    assert "warning" in result.stderr and "logs is empty" in result.stderr and str(empty) in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_check_refuses_a_segment_size_the_store_would_refuse_with_its_line(tmp_path):
    bad = tmp_path / "retention.yaml"
    bad.write_text("logs:\n  a:\n    path: a\n    segment_size: 100\n")
    result = run("check", "--config", str(bad), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == (f"retention: {bad}:4: logs.a.segment_size: must be at least 4KiB "
                                     f"(the store's limit), got 100 bytes")


def test_clean_leaves_a_log_a_running_sidecar_owns_names_it_and_exits_1(tmp_path):
    path, _ = write_config(tmp_path, CONFIG)
    bases = make_log(tmp_path / "staging", 4)
    set_age(tmp_path / "staging", bases[:-1], 3 * 86400)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from retention.deletion import owner; "
        f"owner.claim({str(tmp_path / 'staging')!r}); print('owned', flush=True); sys.stdin.read()")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "owned"
        result = run("clean", "--force", "--config", str(path), cwd=tmp_path)
        assert result.returncode == 1, result.stdout + result.stderr
        assert f"another retention process owns this log (pid {holder.pid}" in result.stdout
        assert segment_bases(tmp_path / "staging") == bases            # nothing deleted
    finally:
        holder.stdin.close()
        holder.wait(10)
    result = run("clean", "--force", "--config", str(path), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert segment_bases(tmp_path / "staging") == bases[-1:]
