"""`retention archive status|upload|verify|forget` on a configuration file: real logs, a directory tier,
the JSON and the text, and the exit status when an archived object is damaged."""

from __future__ import annotations

import json

from retention.cli import main
from retention_helpers import config_text, make_log, write_config


def _config(tmp_path) -> str:
    make_log(tmp_path / "staging", 3)
    path, _ = write_config(tmp_path, config_text(tmp_path, policy={"archive": {"url": f"file://{tmp_path}/archive"}}))
    return str(path)


def _json(capsys, *args) -> tuple[int, dict]:
    status = main(["archive", *args, "--json"])
    return status, json.loads(capsys.readouterr().out)


def test_status_upload_and_verify_report_the_archive_of_each_log(tmp_path, capsys):
    config = _config(tmp_path)
    status, before = _json(capsys, "status", "--config", config)
    assert status == 0 and before["logs"]["staging"]["archived_segments"] == 0
    assert before["logs"]["staging"]["lag_bytes"] > 0
    status, uploaded = _json(capsys, "upload", "--config", config)
    assert status == 0 and uploaded["logs"]["staging"]["uploaded"] == 3
    assert uploaded["logs"]["staging"]["lag_bytes"] == 0 and uploaded["logs"]["staging"]["start_offset"] == 0
    status, verified = _json(capsys, "verify", "--config", config)
    assert status == 0 and verified["logs"]["staging"]["problems"] == []
    assert main(["archive", "status", "--config", config]) == 0
    text = capsys.readouterr().out
    assert f"staging: file://{tmp_path}/archive, 3 segments" in text and "upload lag: 0ms, 0B waiting" in text


def test_verify_names_a_damaged_object_and_exits_1(tmp_path, capsys):
    config = _config(tmp_path)
    assert main(["archive", "upload", "--config", config]) == 0
    victim = tmp_path / "archive" / "staging" / f"{0:020d}.log"
    victim.write_bytes(victim.read_bytes()[:-1] + b"\0")
    capsys.readouterr()
    assert main(["archive", "verify", "--config", config]) == 1
    out = capsys.readouterr().out
    assert f"problem: staging/{0:020d}.log: SHA-256" in out


def test_an_unknown_log_is_a_usage_error_naming_it(tmp_path, capsys):
    assert main(["archive", "status", "--config", _config(tmp_path), "--log", "nope"]) == 2
    assert "--log: no configured log named nope" in capsys.readouterr().err


def test_a_tier_gone_is_no_tier_whose_objects_all_match_until_the_operator_forgets_it(tmp_path, capsys):
    config = _config(tmp_path)
    assert main(["archive", "upload", "--config", config]) == 0
    (tmp_path / "archive").rename(tmp_path / "archive.gone")     # as an unmounted tier looks
    capsys.readouterr()
    assert main(["archive", "verify", "--config", config]) == 1
    assert "problem: the tier shows no tier-identity.json" in capsys.readouterr().out
    status, uploaded = _json(capsys, "upload", "--config", config)
    assert status == 1 and "tier-identity.json" in uploaded["logs"]["staging"]["missing"]
    assert uploaded["logs"]["staging"]["archived_segments"] == 3      # nothing reset
    assert main(["archive", "forget", "--config", config]) == 2
    assert "--log: forget names the logs" in capsys.readouterr().err
    assert main(["archive", "forget", "--config", config, "--log", "staging"]) == 0
    assert "forgotten" in capsys.readouterr().out
    status, again = _json(capsys, "upload", "--config", config)
    assert status == 0 and again["logs"]["staging"]["uploaded"] == 3
