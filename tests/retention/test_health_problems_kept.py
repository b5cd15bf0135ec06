"""The per-log problems the disk check asks for every second are kept between passes
(retention/scheduling/health.py, `PassLedger.problems`): what is kept still changes with a
recorded failure, a new configuration, and a log that turns late with no pass at all."""

from __future__ import annotations

import time

from policies import parse_config
from retention.scheduling.health import PassLedger
from retention.scheduling.history import StatusHistory
from retention.scheduling.metrics import RetentionMetrics


def _config(tmp, names, interval="1s"):
    logs = "".join(f"  {n}:\n    path: {tmp / n}\n" for n in names)
    return parse_config(f"service:\n  audit: {tmp}/audit.jsonl\n  failed_passes_unhealthy: 1\nlogs:\n{logs}"
                        f"policies:\n  default:\n    interval: {interval}\n    delete_at_hours: []\n")


def _kinds(problems) -> set[tuple[str, str]]:
    return {(p.kind, p.subject) for p in problems}


def test_kept_problems_follow_failures_configurations_and_the_clock(tmp_path):
    ledger = PassLedger(RetentionMetrics(process=False), StatusHistory())
    config = _config(tmp_path, ["a", "b"])
    ledger.configure(config.logs)
    assert ledger.problems(config) == []
    ledger.error(["a"], "interval", RuntimeError("boom"), 0.01, time.time())
    assert _kinds(ledger.problems(config)) == {("passes-failing", "a")}
    bigger = _config(tmp_path, ["a", "b"], interval="1h")          # a reload: a new configuration
    ledger.configure(bigger.logs)
    assert _kinds(ledger.problems(bigger)) == {("passes-failing", "a")}
    time.sleep(3.2)                     # past 3 intervals of 1 s: late, though nothing was recorded
    assert _kinds(ledger.problems(config)) == {("passes-failing", "a"), ("passes-late", "a"), ("passes-late", "b")}
    assert _kinds(ledger.problems(bigger)) == {("passes-failing", "a")}
