"""The Spark guide's pipeline (docs/spark.md), run as written (its `staging.yaml` and `pipeline.py`): after `consume`,
retention keeps nothing as `unconsumed:etl`, and `clean` deletes every consumed segment.

`stage` runs in this process, on the tests' Spark session (its paths are resolved in Python, so
changing directory is enough; a second JVM would cost the suite a minute on a busy machine);
`consume` and the retention CLI run in processes of their own, as a user runs them."""

from __future__ import annotations

import json
import os
import re
import runpy
import subprocess
import sys
import time

import pytest

from commitlog import CommitLog

pytestmark = pytest.mark.spark

GUIDE = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "spark.md")


def _block(text: str, name: str, lang: str) -> str:
    """The fenced block that follows the line "`NAME`:" in the guide."""
    found = re.search(rf"^`{re.escape(name)}`:\n```{lang}\n(.*?)^```$", text, re.S | re.M)
    assert found, f"docs/spark.md has no {lang} block for {name}"
    return found.group(1)


def _run(cwd, *args: str) -> str:
    done = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=240, env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _retention(cwd, command: str) -> list[dict]:
    out = _run(cwd, "-m", "retention.cli", command, "--config", "staging.yaml", "--json")
    return json.loads(out)["logs"][0]["files"]


def test_the_readme_pipeline_releases_everything_it_consumed(spark, tmp_path, monkeypatch,
                                                             capsys):
    with open(GUIDE) as f:
        text = f.read()
    (tmp_path / "staging.yaml").write_text(_block(text, "staging.yaml", "yaml"))
    (tmp_path / "pipeline.py").write_text(_block(text, "pipeline.py", "python"))
    with monkeypatch.context() as patch:
        patch.chdir(tmp_path)
        patch.setattr(sys, "argv", ["pipeline.py", "stage", "0", "100000"])
        runpy.run_path("pipeline.py", run_name="__main__")
    assert "100000 rows staged" in capsys.readouterr().out
    assert "100000 rows consumed by etl" in _run(tmp_path, "pipeline.py", "consume")
    log_path = str(tmp_path / "data" / "events")
    with CommitLog.open(log_path, readonly=True) as log:
        end, segments = log.end_offset, [s.base_offset for s in log.segments()]
        assert log.committed() == {"etl": end}          # the last micro-batch included
    assert len(segments) >= 4
    time.sleep(1.5)                                      # reserve: 1s, every sealed one expired
    planned = _retention(tmp_path, "plan")
    assert [f for f in planned if "unconsumed:etl" in f["reasons"]] == []
    to_delete = [f["base_offset"] for f in planned if f["action"] == "delete"]
    assert to_delete == segments[:-1]                    # all but the active segment
    cleaned = _retention(tmp_path, "clean")
    assert sorted(f["base_offset"] for f in cleaned if f["action"] == "deleted") == to_delete
    with CommitLog.open(log_path, readonly=True) as log:
        assert [s.base_offset for s in log.segments()] == segments[-1:]
    with open(tmp_path / "data" / "audit.jsonl") as f:
        audited = [json.loads(line) for line in f if line.strip()]
    assert len(audited) >= len(to_delete)


def test_the_readme_spark_example_runs_as_written(spark, tmp_path, monkeypatch):
    """The README's Spark block, on the tests' session, with a small DataFrame as its `df`."""
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "README.md")) as f:
        found = [body for body in re.findall(r"^```python\n(.*?)^```$", f.read(), re.S | re.M)
                 if "commitlog.spark" in body]
    assert len(found) == 1
    monkeypatch.chdir(tmp_path)
    df = spark.range(0, 1000).selectExpr("id", "cast(id AS string) AS name")
    exec(compile(found[0], "README.md", "exec"), {"spark": spark, "df": df})
    with CommitLog.open(tmp_path / "data" / "events", readonly=True) as log:
        assert log.end_offset > 0
    import commitlog.spark
    assert commitlog.spark.read(spark, str(tmp_path / "data" / "events")).count() == 1000
