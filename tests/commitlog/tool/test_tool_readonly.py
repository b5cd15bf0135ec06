"""Read-only means read-only: every read command leaves a log directory as it was (names, bytes,
modes, mtimes), also for a user who may not write it and on a read-only mount, where a reset says
why in one line; bad input is one line, exit 2, and changes nothing."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from other_user_helpers import AS_NOBODY
from tool_helpers import digest, make_log, one_line, run_tool

READS = [("segments", "--json"), ("segments",), ("verify",), ("verify", "--json"), ("dump",),
         ("dump", "--since", "2027-01-15T08:00:30Z"), ("groups",), ("groups", "--json")]


def _reads_work(path, prefix=()) -> None:
    for args in READS:
        out = run_tool(args[0], path, *args[1:], prefix=prefix)
        assert out.returncode == 0, (args, out.stderr)
        assert out.stderr == ""
        if "--json" in args:
            json.loads(out.stdout)
    dump = run_tool("dump", path, prefix=prefix).stdout.splitlines()
    assert [json.loads(line)["offset"] for line in dump] == list(range(600))


def test_every_read_command_leaves_the_directory_as_it_was(tmp_path):
    path = tmp_path / "app"
    make_log(path)
    before = digest(path)
    _reads_work(path)
    assert digest(path) == before


def test_another_user_reads_a_log_it_may_not_write_and_a_reset_names_why(nobody_tmp):
    path = nobody_tmp / "app"
    make_log(path)
    for entry in [path, *path.iterdir()]:
        os.chmod(entry, 0o755 if entry.is_dir() else 0o644)
    before = digest(path)
    _reads_work(path, prefix=tuple(AS_NOBODY))
    out = run_tool("groups", path, "--reset", "billing", "--to", "earliest", prefix=tuple(AS_NOBODY))
    assert out.returncode == 1
    assert "permission denied" in one_line(out.stderr)
    assert digest(path) == before


def test_a_log_on_a_read_only_mount_reads_and_a_reset_names_the_mount(small_fs):
    path = os.path.join(small_fs, "app")
    make_log(path)
    subprocess.run(["mount", "-o", "remount,ro", small_fs], check=True, capture_output=True)
    before = digest(small_fs)
    _reads_work(path)
    out = run_tool("groups", path, "--delete", "audit")
    assert out.returncode == 1 and "read-only" in one_line(out.stderr)
    assert digest(small_fs) == before


BAD = [
    (("segments", "{missing}"), "no such log directory"),
    (("verify", "{file}"), "a file, not a log directory"),
    (("groups", "{plain}"), "not a log directory (it holds no meta.json)"),
    (("dump", "{log}", "--from", "-1"), "--from: expected an offset"),
    (("dump", "{log}", "--from", "abc"), "--from: expected an offset"),
    (("dump", "{log}", "--from", "601"), "--from 601: not written yet"),
    (("dump", "{log}", "--since", "yesterday"), "--since: expected an ISO 8601 time"),
    (("dump", "{log}", "--count", "0"), "--count: expected a number of records >= 1"),
    (("dump", "{log}", "--from", "3", "--since", "0"), "not allowed with argument"),
    (("groups", "{log}", "--reset", "nobody", "--to", "0"), "--reset nobody: no such consumer group"),
    (("groups", "{log}", "--delete", "nobody"), "--delete nobody: no such consumer group"),
    (("groups", "{log}", "--reset", "billing"), "--reset: give --to"),
    (("groups", "{log}", "--to", "0"), "--to: only with --reset"),
    (("groups", "{log}", "--reset", "billing", "--to", "601"), "--to 601: outside the log"),
    (("groups", "{log}", "--reset", "billing", "--to", "-3"), "--to: expected an offset"),
    (("groups", "{log}", "--reset", "billing", "--to", "soon"), "--to: expected an ISO 8601 time"),
    (("inspect", "{log}"), "invalid choice: 'inspect'"),
    # past what the store's signed 64-bit offsets hold, or not ASCII digits: refused, never waited on
    (("dump", "{log}", "--from", "9999999999999999999", "--follow"), "--from: expected an offset"),
    (("dump", "{log}", "--from", "9223372036854775808"), "--from: expected an offset"),
    (("dump", "{log}", "--from", "\u0661\u0662"), "--from: expected an offset"),
    (("dump", "{log}", "--count", "9223372036854775808"), "--count: expected a number of records"),
    (("groups", "{log}", "--reset", "billing", "--to", "9223372036854775808"), "--to: expected an offset"),
    # a local time no zone can convert (year 0 in UTC): one line, not datetime's traceback
    (("dump", "{log}", "--since", "0001-01-01", "--count", "1"), "--since: '0001-01-01' is out of range"),
    (("groups", "{log}", "--reset", "billing", "--to", "0001-01-01"), "--to: '0001-01-01' is out of range"),
    (("dump", "{log}", "--since", "NaN"), "--since: expected an ISO 8601 time"),
]


@pytest.mark.parametrize("args, says", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_line_exit_2_and_changes_nothing(tmp_path, args, says):
    make_log(tmp_path / "log")
    (tmp_path / "file").write_text("not a log")
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "notes.txt").write_text("a user's file")
    before = digest(tmp_path)
    out = run_tool(*(a.format(missing=tmp_path / "missing", file=tmp_path / "file", plain=tmp_path / "plain",
                              log=tmp_path / "log") for a in args))
    assert out.returncode == 2 and out.stdout == ""
    line = one_line(out.stderr)
    assert line.startswith("commitlog: error: ") and says in line, line
    assert digest(tmp_path) == before
