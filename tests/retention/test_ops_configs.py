"""conf/grafana/retention.json and conf/prometheus/alerts.yml against the real sidecar: every metric
name their expressions use exists in a running `retention serve`'s /metrics; the rules pass
`promtool check rules` and their unit tests (`promtool test rules`, conf/prometheus/alerts_test.yml)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from commitlog import CommitLog

from retention_helpers import config_text, make_log, set_age, write_config
from sidecar_helpers import Sidecar

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "conf" / "grafana" / "retention.json"
ALERTS = ROOT / "conf" / "prometheus" / "alerts.yml"
ALERTS_TEST = ROOT / "conf" / "prometheus" / "alerts_test.yml"

# Words of PromQL the expressions may use besides metric names (functions, aggregations, keywords).
PROMQL_WORDS = {"sum", "rate", "increase", "deriv", "histogram_quantile", "time", "absent", "and", "or",
                "unless", "by", "without", "on", "ignoring", "max", "min", "avg", "count", "offset"}
# Series Prometheus makes itself for every target, not the sidecar.
SCRAPE_SERIES = {"up"}


def metric_names(expr: str) -> set[str]:
    """The metric names in a PromQL expression: every word left once strings, label matchers,
    range selectors, grouping clauses and numbers are removed, that is not a PromQL word."""
    e = re.sub(r'"[^"]*"', "", expr)
    e = re.sub(r"\{[^}]*\}", "", e)
    e = re.sub(r"\[[^\]]*\]", "", e)
    e = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", e)
    words = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", e))
    return words - PROMQL_WORDS


def test_metric_names_are_found_and_words_are_not():
    assert metric_names('sum by (le, kind) (rate(retention_pass_duration_seconds_bucket{kind="x"}[5m]))') == \
        {"retention_pass_duration_seconds_bucket"}
    assert metric_names("up{job='retention'} == 0 or absent(up)") >= {"up"}
    assert metric_names("retention_disk_usedratio > 0.9") == {"retention_disk_usedratio"}


@pytest.fixture(scope="module")
def exposition(tmp_path_factory) -> str:
    """Sample names in a real sidecar's /metrics after a pass that deleted something and a log with
    a consumer group (a labelled metric shows only once it has a series)."""
    tmp = tmp_path_factory.mktemp("metrics")
    bases = make_log(tmp / "staging", 6)
    set_age(tmp / "staging", bases[:3], 7200)
    with CommitLog.open(tmp / "staging") as log:
        log.commit("etl", bases[4])
    make_log(tmp / "archived", 1)
    config_path, _ = write_config(tmp, config_text(
        tmp, sidecar=True, policy={"delete_at_hours": ";".join(f"{hour:02d}" for hour in range(24)),
                                   "retention_bytes": "1GiB"},  # a cap, so its gauge is exported
        logs={"staging": {"path": str(tmp / "staging"), "segment_size": "4KiB"},
              # and a log with an archive tier, so its lag is
              "archived": {"path": str(tmp / "archived"), "segment_size": "4KiB",
                           "overrides": {"archive": {"url": f"file://{tmp}/archive"}}}}))
    with Sidecar(config_path, cwd=tmp) as sidecar:
        sidecar.wait_ready()

        def metrics() -> str:
            text = sidecar.request("GET", "/metrics")[2].decode()
            return text if all(f"{name}{{" in text for name in (
                "retention_deleted_segments_total", "retention_disk_force_ratio", "retention_archive_lag_seconds")) else ""
        return sidecar.wait_for(metrics, what="a deletion, a disk check and an upload run in /metrics")


@pytest.fixture(scope="module")
def exposed(exposition) -> set[str]:
    names = {line.split("{")[0].split(" ")[0] for line in exposition.splitlines() if line and not line.startswith("#")}
    assert "retention_consumer_lag_records" in names
    return names


def test_thresholds_and_hung_age_are_exported_for_the_alerts(exposition):
    values = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
              for line in exposition.splitlines() if line and not line.startswith("#")}
    by_name = lambda name: [v for k, v in values.items() if k.startswith(name + "{")]  # noqa: E731
    assert by_name("retention_disk_clean_ratio") == [0.75]
    assert by_name("retention_disk_force_ratio") == [0.85]
    assert by_name("retention_disk_refuse_writes_ratio") == [0.90]
    assert values['retention_hung_force_after_seconds{log="staging"}'] == 120.0
    assert values['retention_hung_oldest_seconds{log="staging"}'] == 0.0


def _dashboard_exprs() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p["targets"]]


def _alert_exprs() -> list[tuple[str, str]]:
    rules = yaml.safe_load(ALERTS.read_text())
    return [(r["alert"], r["expr"]) for g in rules["groups"] for r in g["rules"]]


@pytest.mark.parametrize("source", ["dashboard", "alerts"])
def test_every_metric_an_expression_uses_exists_in_the_real_metrics(source, exposed):
    exprs = _dashboard_exprs() if source == "dashboard" else _alert_exprs()
    assert exprs
    missing = [(where, name) for where, expr in exprs for name in metric_names(expr)
               if name not in exposed | SCRAPE_SERIES]
    assert missing == []


def test_the_dashboard_covers_what_an_operator_needs():
    used = set().union(*(metric_names(e) for _, e in _dashboard_exprs()))
    for name in ("retention_disk_used_ratio", "retention_disk_force_ratio", "retention_deleted_segments_total",
                 "retention_pass_duration_seconds_bucket", "retention_hung_segments", "retention_pinned_bytes",
                 "retention_consumer_lag_records"):
        assert name in used
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_every_alert_tells_the_operator_what_to_do():
    rules = yaml.safe_load(ALERTS.read_text())
    names = [r["alert"] for g in rules["groups"] for r in g["rules"]]
    assert len(names) == 11
    for g in rules["groups"]:
        for r in g["rules"]:
            assert r["annotations"]["summary"] and len(r["annotations"]["description"]) > 80, r["alert"]
    tested = {t["alertname"] for test in yaml.safe_load(ALERTS_TEST.read_text())["tests"]
              for t in test["alert_rule_test"] if t["exp_alerts"]}
    assert tested == set(names)


PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool missing: install Debian's prometheus package (.ci/run does)")
@pytest.mark.parametrize("args", [("check", "rules", str(ALERTS)), ("test", "rules", str(ALERTS_TEST))],
                         ids=["check", "test"])
def test_promtool_accepts_the_rules_and_their_unit_tests(args):
    result = subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
