"""retention_bytes on real logs: a pass deletes the oldest segments down to the cap (young ones
too), audits them under size-cap, and the sidecar shows the cap (status, metric, plan)."""

from __future__ import annotations

import json
import subprocess
import sys

from retention import Cleaner, read_audit

from retention_helpers import SEGMENT, config_text, make_log, segment_bases, write_config
from sidecar_helpers import Sidecar

CAP = 10 * SEGMENT + 100      # ten 4 KiB segments and a little: the log keeps ten, the active included


def test_a_pass_deletes_young_segments_down_to_the_cap_and_audits_them_as_size_cap(tmp_path):
    bases = make_log(tmp_path / "staging", 19)              # 19 full + 1 active, all seconds old
    _, config = write_config(tmp_path, config_text(policy={"retention_bytes": CAP, "files_per_pass": 100}))
    cleaner = Cleaner(config)
    try:
        result = cleaner.run_pass()                          # no delete hour, no disk pressure
    finally:
        cleaner.close()
    assert result.deleted == 10
    assert segment_bases(tmp_path / "staging") == bases[10:]
    audit = read_audit(tmp_path / "audit.jsonl")
    assert [e["base_offset"] for e in audit] == bases[:10]
    assert all(e["overridden_by"] == "size-cap" and "size-cap" in e["triggers"] for e in audit)
    again = Cleaner(config)
    try:
        assert again.run_pass().deleted == 0                 # at the cap: nothing more goes
    finally:
        again.close()


def test_plan_explains_the_cap_with_its_figures_and_changes_nothing(tmp_path):
    bases = make_log(tmp_path / "staging", 11)
    path, _ = write_config(tmp_path, config_text(policy={"retention_bytes": CAP, "files_per_pass": 100}))
    done = subprocess.run([sys.executable, "-m", "retention.cli", "plan", "--config", str(path), "--json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    decisions = json.loads(done.stdout)["logs"][0]["files"]
    first, kept = decisions[0], decisions[2]
    assert first["action"] == "delete" and first["overridden_by"] == "size-cap"
    assert first["details"]["size-cap"] == "size 48.0KiB > retention_bytes 40.1KiB"
    assert kept["action"] == "keep" and "no-trigger" in kept["reasons"]
    assert segment_bases(tmp_path / "staging") == bases


def test_the_sidecar_shows_the_cap_in_status_and_metrics(tmp_path):
    make_log(tmp_path / "staging", 3)
    path, _ = write_config(tmp_path, config_text(tmp_path, sidecar=True, policy={"retention_bytes": "1MiB"}))
    with Sidecar(path, cwd=tmp_path) as sidecar:
        sidecar.wait_ready()
        status = sidecar.get_json("/status")[1]
        assert status["policies"]["default"]["retention_bytes"] == 1 << 20
        metrics = sidecar.request("GET", "/metrics")[2].decode()
        assert 'retention_log_retention_bytes{log="staging"} 1.048576e+06' in metrics
