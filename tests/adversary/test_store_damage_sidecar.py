"""Probe: damage a writer's open found is the sidecar's to tell: health problem `log-damaged`
while the log's damage record holds entries, and one `damaged` audit line per entry, not repeated
by later passes nor by a restarted sidecar."""

from __future__ import annotations

import json
import os
import signal
import sys

from commitlog import CommitLog
from commitlog.damage import RECORD_LOST
from commitlog.layout import DAMAGE_FILE, segment_path

from storea_helpers import HERE, expect, flip, record_positions, spawn

sys.path.insert(0, os.path.join(os.path.dirname(HERE), "retention"))
from retention_helpers import config_text, write_config  # noqa: E402
from sidecar_helpers import Sidecar  # noqa: E402

SEGMENT = 1 << 16


def _damaged_lines(audit: str) -> list[dict]:
    if not os.path.exists(audit):
        return []
    with open(audit) as f:
        return [e for e in map(json.loads, filter(str.strip, f)) if e.get("event") == "damaged"]


def _problems(s: Sidecar) -> list[tuple[str, str | None]]:
    return [(d["problem"], d["log"]) for d in s.get_json("/healthz")[1]["details"]]


def test_a_damaged_log_is_a_health_problem_and_one_audit_line_until_the_operator_clears_it(tmp_path):
    log = str(tmp_path / "staging")
    child = spawn(f"acked_writer({log!r}, {SEGMENT}, 200, 100)")
    try:
        assert expect(child) == {"acked": 200}
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    seg = segment_path(log, 0)
    flip(seg, record_positions(seg)[190] + 60)
    CommitLog.open(log).close()                      # the writer's open finds and records it
    config, _ = write_config(tmp_path, config_text(
        tmp_path, sidecar=True, logs={"staging": {"path": log, "segment_size": "64KiB"}},
        policy={"interval": "1s", "disk_check_interval": "1s"}))
    audit = str(tmp_path / "audit.jsonl")
    with Sidecar(config, cwd=tmp_path) as s:
        s.wait_for(lambda: ("log-damaged", "staging") in _problems(s), timeout=90, what="log-damaged")
        [detail] = [d for d in s.get_json("/healthz")[1]["details"] if d["problem"] == "log-damaged"]
        assert DAMAGE_FILE in detail["message"] and "offsets [190, 191)" in detail["message"]
        assert s.log().count("problem started: log-damaged") == 1
        [line] = _damaged_lines(audit)
        assert (line["log"], line["kind"], line["offsets"], line["segment"]) == \
            ("staging", RECORD_LOST, [190, 191], os.path.basename(seg))
    with Sidecar(config, cwd=tmp_path) as s:         # a restart does not audit it again
        s.wait_for(lambda: ("log-damaged", "staging") in _problems(s), timeout=90, what="log-damaged")
        os.unlink(os.path.join(log, DAMAGE_FILE))     # the operator dealt with it
        s.wait_for(lambda: s.request("GET", "/healthz")[0] == 200, timeout=90, what="healthy again")
        assert s.log().count("problem cleared: log-damaged") == 1
    assert len(_damaged_lines(audit)) == 1
