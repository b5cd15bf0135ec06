"""Shared byte budgets on real logs: three logs of 4 KiB segments with weights 2:1:1 in a budget of
16 segments; a real sidecar enforces it across the three on its first pass, a consumer group's
unconsumed records stay protected, and the reason, the audit line, the metric, /status and the
page's data say so; `retention plan` gives the figures; a pass over one log of a budget decides
all of them; `retention check` refuses each bad budget in one line, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from commitlog import CommitLog
from retention import Cleaner, read_audit

from retention_helpers import SEGMENT, config_text, make_log, segment_bases, write_config
from sidecar_helpers import Sidecar

BUDGET_BYTES = 16 * SEGMENT          # shares: a 8 segments, b 4, c 4
BAD_BUDGETS = sorted((Path(__file__).parents[1] / "policies" / "bad_configs").glob("budget_*.yaml"))


def budget_config(tmp_path: Path, **more) -> str:
    """Logs a (10 files: 9 full segments and the active one), b (9) and c (6) in budget `shared`."""
    logs = {name: {"path": str(tmp_path / name), "segment_size": "4KiB"} for name in "abc"}
    body = yaml.safe_load(config_text(tmp_path, logs=logs, **more))
    body["budgets"] = {"shared": {"bytes": BUDGET_BYTES, "logs": {"a": {"weight": 2}, "b": {}, "c": {}}}}
    return yaml.safe_dump(body, sort_keys=False)


def make_logs(tmp_path: Path, *, protect_c: bool) -> dict[str, list[int]]:
    bases = {"a": make_log(tmp_path / "a", 9), "b": make_log(tmp_path / "b", 8), "c": make_log(tmp_path / "c", 5)}
    if protect_c:
        with CommitLog.open(tmp_path / "c") as log:
            log.commit("etl", bases["c"][1])          # etl has read c's first segment only
    return bases


def test_retention_plan_gives_the_budget_figures_and_changes_nothing(tmp_path):
    bases = make_logs(tmp_path, protect_c=False)
    path, _ = write_config(tmp_path, budget_config(tmp_path))
    done = subprocess.run([sys.executable, "-m", "retention.cli", "plan", "--config", str(path), "--json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    logs = {log["name"]: log for log in json.loads(done.stdout)["logs"]}
    assert all("budget" in logs[n]["triggers"] for n in "abc")
    # 25 files against 16: each log down to its share exactly (a 2, b 5, c 2); b is furthest above first.
    assert [logs[n]["deleted"] for n in "abc"] == [2, 5, 2]
    first = logs["b"]["files"][0]
    assert first["because"] == ["budget"] and first["overridden"] == ["reserved"] and first["overridden_by"] == "budget"
    assert first["details"]["budget"] == "log b: 36.0KiB, share 16.0KiB; budget shared 64.0KiB, 100.0KiB used"
    assert {n: segment_bases(tmp_path / n) for n in "abc"} == bases


def test_a_pass_over_one_log_of_a_budget_decides_all_of_its_logs(tmp_path):
    bases = make_logs(tmp_path, protect_c=False)
    _, config = write_config(tmp_path, budget_config(tmp_path))
    cleaner = Cleaner(config)
    try:
        result = cleaner.run_pass(names=["a"])
    finally:
        cleaner.close()
    assert sorted(r.name for r in result.logs) == ["a", "b", "c"]
    assert {n: segment_bases(tmp_path / n) for n in "abc"} == {"a": bases["a"][2:], "b": bases["b"][5:],
                                                               "c": bases["c"][2:]}


def test_the_sidecar_enforces_the_budget_across_three_logs_and_shows_it(tmp_path):
    bases = make_logs(tmp_path, protect_c=True)
    path, _ = write_config(tmp_path, budget_config(tmp_path, sidecar=True))
    with Sidecar(path, cwd=tmp_path) as sidecar:
        sidecar.wait_ready()
        status = sidecar.wait_for(lambda: _passed(sidecar), what="a pass over a, b and c")
        # a and b down to their shares; c gives up only what etl has read: 17 segments, 1 over.
        assert {n: segment_bases(tmp_path / n) for n in "abc"} == {"a": bases["a"][2:], "b": bases["b"][5:],
                                                                   "c": bases["c"][1:]}
        budget = status["budgets"]["shared"]
        assert budget["bytes"] == BUDGET_BYTES and budget["used_bytes"] == 17 * SEGMENT and budget["over"] is True
        assert [(log["name"], log["weight"], log["floor_bytes"], log["share_bytes"], log["bytes"])
                for log in budget["logs"]] == [("a", 2, 0, 8 * SEGMENT, 8 * SEGMENT),
                                               ("b", 1, 0, 4 * SEGMENT, 4 * SEGMENT),
                                               ("c", 1, 0, 4 * SEGMENT, 5 * SEGMENT)]
        metrics = sidecar.request("GET", "/metrics")[2].decode()
        assert 'retention_deleted_segments_total{log="b",trigger="budget"} 5.0' in metrics
        assert 'retention_deleted_segments_total{log="c",trigger="budget"} 1.0' in metrics
        assert f'retention_budget_used_bytes{{budget="shared"}} {float(17 * SEGMENT)}' in metrics
        assert f'retention_budget_share_bytes{{budget="shared",log="a"}} {float(8 * SEGMENT)}' in metrics
        # c's next segment is etl's: the plan keeps it for etl, not for the budget.
        plan = {log["name"]: log for log in sidecar.get_json("/plan")[1]["logs"]}
        assert "unconsumed:etl" in plan["c"]["files"][0]["reasons"] and plan["c"]["deleted"] == 0
        shown = subprocess.run([sys.executable, "-m", "retention.cli", "status", "--url", sidecar.url],
                               cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
        assert ("budget shared: 68.0KiB used of 64.0KiB (OVER); a 32.0KiB of 32.0KiB (weight 2), "
                "b 16.0KiB of 16.0KiB (weight 1), c 20.0KiB of 16.0KiB (weight 1)") in shown.stdout
        page = sidecar.get_json("/ui/data")[1]
        assert page["budgets"]["shared"]["over"] is True
        assert any(e["log"] == "b" and e["budget"].startswith("log b: ") for e in page["deletions"])
    audit = read_audit(tmp_path / "audit.jsonl")
    assert sorted((e["log"], e["base_offset"]) for e in audit) == sorted(
        [("a", o) for o in bases["a"][:2]] + [("b", o) for o in bases["b"][:5]] + [("c", bases["c"][0])])
    assert all("budget" in e["triggers"] and e["overridden_by"] == "budget" for e in audit)
    first_b = next(e for e in audit if e["log"] == "b")
    assert first_b["budget"] == "log b: 36.0KiB, share 16.0KiB; budget shared 64.0KiB, 100.0KiB used"
    assert not any(e["unconsumed"] for e in audit)                       # nothing unread went


def _passed(sidecar) -> dict | None:
    status = sidecar.get_json("/status")[1]
    return status if all(log["last_pass"] for log in status["logs"]) and status["budgets"]["shared"]["used_bytes"] \
        else None


@pytest.mark.parametrize("bad", BAD_BUDGETS, ids=lambda p: p.stem)
def test_retention_check_refuses_a_bad_budget_in_one_line_exit_2(bad, tmp_path):
    expect = bad.read_text().splitlines()[0].removeprefix("# expect:").strip()
    done = subprocess.run([sys.executable, "-m", "retention.cli", "check", "--config", str(bad)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and bad.name in lines[0] and expect in lines[0], lines
    assert "Traceback" not in done.stderr and list(tmp_path.iterdir()) == []


def test_the_four_refusals_are_there():
    assert {p.stem for p in BAD_BUDGETS} == {"budget_unknown_log", "budget_log_in_two_budgets", "budget_weight_zero",
                                             "budget_floors_exceed"}
