"""A compacting process SIGKILLed between its intent and its outcome leaves an intent the next pass
settles with `recovered: true`, saying whether the output happened by looking at the log; no live
record is lost either way."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from retention import read_events
from retention.compactor import Compactor

from compaction_helpers import compaction_config, dead_log, scan_pairs

CHILD = Path(__file__).with_name("compact_child.py")


def _run_child(config_path: Path, point: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHILD), str(config_path), point], cwd=cwd,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("point, event, reason", [
    ("after-intent", "aborted", "not-compacted"),
    ("after-commit", "compacted", None),
    ("before-outcome", "compacted", None),
])
def test_an_intent_left_by_a_killed_compaction_is_settled_by_the_next_pass(tmp_path, point, event, reason):
    live = dead_log(tmp_path / "a", 4)
    config_path, config = compaction_config(tmp_path, tmp_path / "a", merge="false")
    done = _run_child(config_path, point, tmp_path)
    assert done.returncode == -signal.SIGKILL, done.stderr
    events = read_events(str(tmp_path / "audit.jsonl"))
    assert [e["event"] for e in events] == ["intent"]
    intent = events[0]
    assert scan_pairs(tmp_path / "a") == live            # whatever happened, nothing live was lost

    c = Compactor(config)
    result = c.run()
    c.close()
    events = read_events(str(tmp_path / "audit.jsonl"))
    settled = [e for e in events if e.get("id") == intent["id"] and e["event"] != "intent"]
    assert len(settled) == 1
    line = settled[0]
    assert line["event"] == event and line["recovered"] is True
    assert (line["first_offset"], line["end_offset"]) == (intent["first_offset"], intent["end_offset"])
    if reason is not None:
        assert line["reason"] == reason
    else:
        assert line["bytes_before"] == intent["bytes_before"] and 0 < line["bytes_after"] < line["bytes_before"]
    # The next pass finishes the work: every segment is compacted once, and each once audited.
    compacted = [e for e in events if e["event"] == "compacted"]
    spans = sorted((e["first_offset"], e["end_offset"]) for e in compacted)
    assert len(spans) == len(set(spans)) == 4
    assert result.logs[0].error is None
    assert scan_pairs(tmp_path / "a") == live


def test_a_child_that_is_not_killed_leaves_nothing_to_settle(tmp_path):
    dead_log(tmp_path / "a", 2)
    config_path, config = compaction_config(tmp_path, tmp_path / "a")
    done = _run_child(config_path, "none", tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["outputs"] == 1
    c = Compactor(config)
    assert c.settle() == 0
    c.close()
