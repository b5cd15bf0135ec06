"""Per-log overrides on real logs: a pass applies a log's own keys and leaves its neighbour under
the policy; `retention check --json` and the sidecar's /status show the policy in force."""

from __future__ import annotations

import json
import subprocess
import sys

from retention import Cleaner

from retention_helpers import SEGMENT, config_text, make_log, segment_bases, write_config
from sidecar_helpers import Sidecar

CAP = 5 * SEGMENT


def _two_logs(tmp_path, *, sidecar: bool = False) -> str:
    logs = {"staging": {"path": str(tmp_path / "staging"), "segment_size": "4KiB",
                        "overrides": {"retention_bytes": CAP, "files_per_pass": 100}},
            "clicks": {"path": str(tmp_path / "clicks"), "segment_size": "4KiB"}}
    return config_text(tmp_path, sidecar=sidecar, logs=logs)


def test_a_pass_applies_a_logs_overrides_and_not_its_neighbours(tmp_path):
    staging, clicks = make_log(tmp_path / "staging", 9), make_log(tmp_path / "clicks", 9)
    _, config = write_config(tmp_path, _two_logs(tmp_path))
    cleaner = Cleaner(config)
    try:
        result = cleaner.run_pass()
    finally:
        cleaner.close()
    assert result.deleted == 5                                    # 10 segments -> 5, the cap
    assert segment_bases(tmp_path / "staging") == staging[5:]
    assert segment_bases(tmp_path / "clicks") == clicks             # no cap, nothing expired


def test_check_json_shows_each_logs_policy_in_force(tmp_path):
    path, _ = write_config(tmp_path, _two_logs(tmp_path))
    done = subprocess.run([sys.executable, "-m", "retention.cli", "check", "--config", str(path), "--json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    logs = json.loads(done.stdout)["logs"]
    assert logs["staging"]["overrides"] == {"retention_bytes": CAP, "files_per_pass": 100}
    assert logs["staging"]["policy_in_force"]["retention_bytes"] == "20KiB"
    assert logs["staging"]["policy_in_force"]["files_per_pass"] == 100
    assert logs["clicks"]["overrides"] == {} and logs["clicks"]["policy_in_force"]["retention_bytes"] is None


def test_the_sidecar_status_shows_overrides_and_the_policy_in_force(tmp_path):
    make_log(tmp_path / "staging", 2)
    make_log(tmp_path / "clicks", 2)
    path, _ = write_config(tmp_path, _two_logs(tmp_path, sidecar=True))
    with Sidecar(path, cwd=tmp_path) as sidecar:
        sidecar.wait_ready()
        logs = {log["name"]: log for log in sidecar.get_json("/status")[1]["logs"]}
        assert logs["staging"]["overrides"] == {"retention_bytes": CAP, "files_per_pass": 100}
        assert logs["staging"]["policy_in_force"]["retention_bytes"] == CAP
        assert logs["staging"]["retention_bytes"] == CAP
        assert logs["clicks"]["policy_in_force"] is None and logs["clicks"]["retention_bytes"] is None
