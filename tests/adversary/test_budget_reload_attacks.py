"""Shared byte budgets attacked by a reload (issue 39): the budget's configuration rewritten and
SIGHUP sent while a pass slowed by `pause_between_files` deletes under it. What must hold: no
deletion begun (its intent written) after the reload was applied is one the old budget asked for;
every intent has its outcome; no traceback; `/status` shows the new budget. A real sidecar on
loopback HTTP, real logs, its real audit trail."""

from __future__ import annotations

import json
import re
import signal
import time
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from policies import parse_config
from policies.units import humanize_size
from retention.audit import read_events

from retention_helpers import SEGMENT, make_log, segment_bases
from sidecar_helpers import Sidecar

LOGS = ("a", "b", "c")
OLD_BYTES = 12 * SEGMENT          # 24 sealed segments and three active ones: about 13 segments go
_APPLIED = "reload (SIGHUP): applied"
_FIGURES = re.compile(r"log (\S+): \S+, share (\S+); budget (\S+) (\S+), \S+ used")


def _config(tmp: Path, budgets: dict | None) -> str:
    text = {
        "service": {"listen": "127.0.0.1:0", "audit": str(tmp / "audit.jsonl"), "log_level": "INFO"},
        "logs": {n: {"path": str(tmp / n), "segment_size": "4KiB"} for n in LOGS},
        "policies": {"default": {"interval": "1h", "delete_at_hours": list(range(24)), "reserve": "1h",
                                 "pause_between_files": "400ms", "disk_check_interval": "1h"}},
    }
    if budgets is not None:
        text["budgets"] = budgets
    return yaml.safe_dump(text)


OLD = {"shared": {"bytes": OLD_BYTES, "logs": {n: {} for n in LOGS}}}
CHANGES = {
    "bytes-raised": {"shared": {"bytes": 64 * SEGMENT, "logs": {n: {} for n in LOGS}}},
    "weight-changed": {"shared": {"bytes": OLD_BYTES, "logs": {"a": {"weight": 4}, "b": {}, "c": {}}}},
    "log-moved-out": {"shared": {"bytes": OLD_BYTES, "logs": {"a": {}, "b": {}}}},
    "budget-removed": None,
}


def _applied_at(sidecar: Sidecar) -> float:
    """The wall-clock moment the sidecar logged the reload applied (loguru's local-time stamp)."""
    line = next(line for line in sidecar.log().splitlines() if _APPLIED in line)
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S.%f").timestamp()


def _figures(line: dict) -> tuple[str, str, str, str]:
    """(log, share, budget name, budget bytes) as a budget deletion's audit line gives them."""
    found = _FIGURES.fullmatch(line["budget"])
    assert found, line["budget"]
    return found.groups()


def _settled(audit: Path) -> int:
    """The number of deletions once none came for 1.5 s (a pause between files is 0.4 s)."""
    count, since = -1, time.monotonic()
    while time.monotonic() - since < 1.5:
        now = len(_deletions(audit))
        if now != count:
            count, since = now, time.monotonic()
        time.sleep(0.1)
    return count


def _deletions(audit: Path) -> list[tuple[float, dict]]:
    """(the time of its intent, its `deleted` line) of each deletion, in the trail's order."""
    events = read_events(str(audit))
    intents = {e["id"]: datetime.fromisoformat(e["time"]).timestamp() for e in events if e.get("event") == "intent"}
    return [(intents[e["id"]], e) for e in events if e.get("event") == "deleted"]


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_budget_rewritten_mid_pass_deletes_nothing_the_old_one_asked_for_after_the_reload(tmp_path, change):
    for n in LOGS:
        make_log(tmp_path / n, 8)
    before = {n: segment_bases(tmp_path / n) for n in LOGS}
    config = tmp_path / "retention.yaml"
    config.write_text(_config(tmp_path, OLD))
    audit = tmp_path / "audit.jsonl"
    new = CHANGES[change]
    with Sidecar(config, cwd=tmp_path) as sidecar:
        sidecar.wait_for(lambda: len(_deletions(audit)) >= 2, timeout=30, what="the pass's second deletion")
        config.write_text(_config(tmp_path, new))
        sidecar.send(signal.SIGHUP)
        sidecar.wait_for(lambda: _APPLIED in sidecar.log(), what="the reload applied")
        applied = _applied_at(sidecar)
        _settled(audit)                       # the resumed pass, paced, and any straggler of the old one
        _, status = sidecar.get_json("/status")
        log = sidecar.log()
        assert sidecar.proc.poll() is None, log
    assert "Traceback" not in log, log
    assert "was interrupted by a reload: resuming it now" in log, log      # the reload came mid-pass
    events = read_events(str(audit))
    intents = {e["id"] for e in events if e.get("event") == "intent"}
    assert intents <= {e["id"] for e in events if e.get("event") != "intent"}, "an intent without its outcome"
    deletions = _deletions(audit)
    old_figures = [e for at, e in deletions if at <= applied]
    after = [e for at, e in deletions if at > applied]
    print(f"{change}: {len(old_figures)} deletions begun before the reload, {len(after)} after")
    old_budget = humanize_size(OLD_BYTES)
    assert all(_figures(e)[1:] == ("16.0KiB", "shared", old_budget) for e in old_figures), old_figures
    assert len(old_figures) < 13, "the old pass had finished before the reload: no mid-pass reload"
    new_config = parse_config(_config(tmp_path, new))
    for e in after:                     # each deletion begun after the reload: the new budget's
        budget = new_config.budgets.get("shared")
        assert budget is not None and e["log"] in budget.logs, f"{change}: deleted after the reload: {e}"
        wanted = (e["log"], humanize_size(budget.share(e["log"])), "shared", humanize_size(budget.bytes))
        assert _figures(e) == wanted, f"{change}: deleted after the reload by other figures: {e}"
    if change in ("bytes-raised", "budget-removed"):
        assert not after
    left = {n: segment_bases(tmp_path / n) for n in LOGS}
    gone = sum(len(before[n]) - len(left[n]) for n in LOGS)
    assert gone == len(deletions), (before, left)
    shown = status["budgets"]
    if new is None:
        assert shown == {}, json.dumps(shown)
        return
    budget = new_config.budgets["shared"]
    view = shown["shared"]
    assert view["bytes"] == budget.bytes and not view["over"], json.dumps(view)
    assert {p["name"]: (p["weight"], p["share_bytes"]) for p in view["logs"]} == \
        {n: (part.weight, budget.share(n)) for n, part in budget.logs.items()}, json.dumps(view)
    assert view["used_bytes"] == sum(p["bytes"] for p in view["logs"]) <= budget.bytes, json.dumps(view)
