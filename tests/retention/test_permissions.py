"""Permissions named: the CLI and a real sidecar running as uid 65534 (setpriv) against a log they
may not read, one they may read but not write, and an audit trail they cannot write; and
`retention check` on a log path whose parent does not exist.

Before: a log the user may not read was "not a commit log yet ... nothing to do" (exit 0, healthy
forever); one it could read but not write was "corrupt log file state.db ... attempt to write a
readonly database"; an audit trail it could not write was found only when a deletion failed; and
`retention check` said "ok" to all of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from other_user_helpers import NOBODY, NOBODY_NAME, run_cli_as_nobody
from retention_helpers import config_text, make_log, segment_bases, set_age, write_config
from sidecar_helpers import Sidecar

USER = f"uid {NOBODY} ({NOBODY_NAME})"


def _logs(tmp: Path, *, audit_dir_mode: int = 0o777, **extra) -> tuple[Path, list[int], list[int]]:
    """`private` (mode 0700: nobody may not read it) and `shared` (read-only to nobody), both with
    expired segments; the audit trail in a directory of `audit_dir_mode`; returns the config."""
    bases = {}
    for name in ("private", "shared"):
        bases[name] = make_log(tmp / name, 3)
        set_age(tmp / name, bases[name][:-1], 7200)
    os.chmod(tmp / "private", 0o700)
    for path in [tmp / "shared", *(tmp / "shared").iterdir()]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    (tmp / "audit").mkdir(mode=audit_dir_mode)
    os.chmod(tmp / "audit", audit_dir_mode)
    logs = {name: {"path": str(tmp / name), "segment_size": "4KiB"} for name in ("private", "shared")}
    config, _ = write_config(tmp, config_text(tmp, logs=logs, service={"audit": str(tmp / "audit" / "audit.jsonl"),
                                                                       **extra.pop("service", {})}, **extra))
    os.chmod(config, 0o644)
    return config, bases["private"], bases["shared"]


def test_the_cli_names_a_log_its_user_may_not_read_and_plans_one_it_may_not_write(nobody_tmp):
    config, private, shared = _logs(nobody_tmp)
    plan = run_cli_as_nobody("plan", "--config", str(config), cwd=nobody_tmp)
    assert plan.returncode == 1, plan.stderr          # a log that cannot be read fails the plan
    private_line = next(line for line in plan.stdout.splitlines() if line.startswith("log private"))
    assert "permission denied" in private_line and USER in private_line and str(nobody_tmp / "private") in private_line
    assert "not a commit log yet" not in plan.stdout and "corrupt" not in plan.stdout
    # The shared log is planned segment by segment, and says why nothing can go.
    assert all(f"{base:020d}.log" in plan.stdout for base in shared)
    assert f"read only: log {nobody_tmp / 'shared'} cannot be written: permission denied: {USER}" in plan.stdout

    as_json = json.loads(run_cli_as_nobody("plan", "--json", "--config", str(config), cwd=nobody_tmp).stdout)
    logs = {log["name"]: log for log in as_json["logs"]}
    assert logs["private"]["permission_denied"] is True and "permission denied" in logs["private"]["error"]
    assert logs["shared"]["permission_denied"] is True and len(logs["shared"]["files"]) == len(shared)

    clean = run_cli_as_nobody("clean", "--json", "--config", str(config), cwd=nobody_tmp)
    assert clean.returncode == 1
    shared_result = next(log for log in json.loads(clean.stdout)["logs"] if log["name"] == "shared")
    failed = [f for f in shared_result["files"] if f["action"] == "failed"]
    assert len(failed) == 1 and "cannot be written: permission denied" in failed[0]["error"]
    assert "corrupt" not in clean.stdout + clean.stderr
    assert segment_bases(nobody_tmp / "shared") == shared and segment_bases(nobody_tmp / "private") == private
    # Nothing was attempted, so nothing is audited as attempted.
    audit = nobody_tmp / "audit" / "audit.jsonl"
    assert not audit.exists() or "intent" not in audit.read_text()


def test_check_as_the_sidecars_user_names_each_path_it_cannot_use(nobody_tmp):
    config, _, _ = _logs(nobody_tmp, audit_dir_mode=0o755)     # nobody cannot create the audit trail
    check = run_cli_as_nobody("check", "--config", str(config), cwd=nobody_tmp)
    assert check.returncode == 1 and check.stdout == ""
    lines = check.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("retention: error: ")]
    warnings = [line for line in lines if line.startswith("retention: warning: ")]
    assert len(errors) == 2 and len(warnings) == 1, lines
    assert f"service.audit: the audit trail {nobody_tmp / 'audit' / 'audit.jsonl'} cannot be written: " \
           f"permission denied: {USER}" in errors[0]
    assert "logs.private:" in errors[1] and "permission denied" in errors[1] and USER in errors[1]
    assert "logs.shared:" in warnings[0] and "cannot be written" in warnings[0]
    found = json.loads(run_cli_as_nobody("check", "--json", "--config", str(config), cwd=nobody_tmp).stdout)
    assert [f["level"] for f in found["findings"]] == ["error", "error", "warning"]


def test_check_warns_about_a_log_path_whose_parent_does_not_exist(tmp_path):
    config, _ = write_config(tmp_path, config_text(tmp_path, logs={
        "typo": {"path": str(tmp_path / "no-such-volume" / "orders")},
        "later": {"path": str(tmp_path / "orders")}}))
    result = subprocess.run([sys.executable, "-m", "retention.cli", "check", "--config", str(config)],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == (f"retention: warning: {config}: logs.typo: {tmp_path / 'no-such-volume' / 'orders'}: "
                                     f"its parent directory {tmp_path / 'no-such-volume'} does not exist "
                                     "(a volume not mounted, or a typo?)")
    assert result.stdout.strip().endswith("ok (2 logs, 1 policy)")


def test_a_sidecar_names_each_permission_problem_in_health_status_and_metrics(nobody_tmp):
    config, private, shared = _logs(nobody_tmp, audit_dir_mode=0o755, sidecar=True,
                                    policy={"interval": "1s", "delete_at_hours": list(range(24)),
                                            "disk_check_interval": "1s"})
    with Sidecar(config, cwd=nobody_tmp, as_user=NOBODY) as s:
        # The audit trail is named at start, before any pass could fail a deletion on it.
        s.wait_for(lambda: "problem started: audit-unwritable" in s.log(), timeout=10, what="audit-unwritable")
        kinds = {"log-permission-denied": 2, "audit-unwritable": 1}
        s.wait_for(lambda: sorted((d["problem"], d["log"]) for d in s.get_json("/healthz")[1]["details"]
                                  if d["problem"] in kinds) ==
                   [("audit-unwritable", None), ("log-permission-denied", "private"),
                    ("log-permission-denied", "shared")], timeout=30, what="the three problems")
        status, body = s.get_json("/healthz")
        assert status == 503
        messages = {(d["problem"], d["log"]): d["message"] for d in body["details"]}
        assert "cannot be read: permission denied" in messages[("log-permission-denied", "private")]
        assert "cannot be written: permission denied" in messages[("log-permission-denied", "shared")]
        assert str(nobody_tmp / "audit" / "audit.jsonl") in messages[("audit-unwritable", None)]
        assert all(USER in m for m in messages.values() if m and "permission" in m)
        st = s.get_json("/status")[1]
        problems = {(p["problem"], p["log"]) for p in st["health"]["problems"]}
        assert {("log-permission-denied", "private"), ("log-permission-denied", "shared"),
                ("audit-unwritable", None)} <= problems
        private_state = next(log for log in st["logs"] if log["name"] == "private")
        assert private_state["exists"] is True and "permission denied" in private_state["error"]
        metrics = s.request("GET", "/metrics")[2].decode()
        assert 'retention_health_problems{problem="log-permission-denied"} 2.0' in metrics
        assert 'retention_health_problems{problem="audit-unwritable"} 1.0' in metrics
        # Each said once, however many passes and checks ran.
        s.wait_for(lambda: "problem started: passes-failing" in s.log(), timeout=30, what="a few failing passes")
        assert s.log().count("problem started: log-permission-denied: log private") == 1
        assert s.log().count("problem started: audit-unwritable") == 1
        assert s.log().count("cannot watch") <= 1
    assert segment_bases(nobody_tmp / "shared") == shared and segment_bases(nobody_tmp / "private") == private
    assert "corrupt" not in s.log()


def test_an_audit_trail_made_writable_clears_its_problem_without_a_restart(nobody_tmp):
    config, _, _ = _logs(nobody_tmp, audit_dir_mode=0o755, sidecar=True, policy={"disk_check_interval": "1s"})
    with Sidecar(config, cwd=nobody_tmp, as_user=NOBODY) as s:
        s.wait_for(lambda: "problem started: audit-unwritable" in s.log(), timeout=10, what="audit-unwritable")
        os.chmod(nobody_tmp / "audit", 0o777)
        s.wait_for(lambda: "problem cleared: audit-unwritable" in s.log(), timeout=10, what="cleared")
        assert 'retention_health_problems{problem="audit-unwritable"} 0.0' in s.request("GET", "/metrics")[2].decode()
