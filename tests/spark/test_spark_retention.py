"""A stream's progress is what retention protects: `retention plan` keeps the segments a consumer
group has not consumed (`unconsumed:GROUP`) and releases them once the group moves on."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone

import pytest

import commitlog.spark
from commitlog import CommitLog

from spark_helpers import stage

pytestmark = pytest.mark.spark


def _plan(tmp_path, log_path: str) -> tuple[list[dict], int]:
    config = tmp_path / "retention.yaml"
    config.write_text(textwrap.dedent(f"""
        service:
          audit: {tmp_path / "audit.jsonl"}
        logs:
          staging:
            path: {log_path}
            segment_size: 256KiB
            policy: staging
        policies:
          staging:
            delete_at_hours: [{", ".join(str(h) for h in range(24))}]
            reserve: 1h
            files_per_pass: 100
            protect_unconsumed: true
    """))
    at = (datetime.now(timezone.utc) + timedelta(hours=2)).isoformat()   # every segment expired
    out = subprocess.run([sys.executable, "-m", "retention.cli", "plan", "--config", str(config),
                          "--json", "--at", at], capture_output=True, text=True, check=True)
    files = json.loads(out.stdout)["logs"][0]["files"]
    with CommitLog.open(log_path, readonly=True) as log:
        committed = log.committed()["etl"]
    return files, committed


def _stream(spark, log_path: str, checkpoint: str):
    query = (spark.readStream.format("commitlog").option("path", log_path).option("group", "etl")
             .option("maxRowsPerTrigger", 1000).load()
             .writeStream.format("noop").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    assert commitlog.spark.await_termination(query, 120)
    assert query.exception() is None


def _rows(spark, start: int, partitions: int):
    # ~110 KB a partition, staged as records of 32 KiB (an eighth of a segment): 6 a segment.
    return spark.range(start, start + partitions * 1000, numPartitions=partitions) \
        .selectExpr("id", "repeat('p', 100) AS pad")


def test_retention_plan_keeps_what_the_group_has_not_consumed(spark, log_path, tmp_path):
    checkpoint = str(tmp_path / "checkpoint")
    stage(_rows(spark, 0, 4), log_path, segmentSize="256KiB")
    with CommitLog.open(log_path, readonly=True) as log:
        read_first = log.end_offset
    _stream(spark, log_path, checkpoint)          # reads them all, the last batch committed too
    stage(_rows(spark, 4000, 4), log_path)        # more that nobody consumed yet
    files, committed = _plan(tmp_path, log_path)
    assert committed == read_first
    assert len(files) >= 4
    for i, f in enumerate(files):
        end = files[i + 1]["base_offset"] if i + 1 < len(files) else None
        unconsumed = end is None or end > committed      # holds an offset >= committed
        assert ("unconsumed:etl" in f["reasons"]) == unconsumed or "active" in f["reasons"], f
        if not unconsumed:
            assert f["action"] == "delete", f
        elif "active" not in f["reasons"]:
            assert f["action"] == "keep", f
    kept = [f["base_offset"] for f in files
            if "unconsumed:etl" in f["reasons"] and "active" not in f["reasons"]]
    assert kept                                   # whole segments kept for the group

    # The group moves on: a new batch lets Spark commit everything read before it.
    stage(_rows(spark, 8000, 1), log_path)
    _stream(spark, log_path, checkpoint)
    files, moved = _plan(tmp_path, log_path)
    assert moved > max(kept)
    released = {f["base_offset"]: f for f in files if f["base_offset"] in kept}
    assert set(released) == set(kept)
    assert all(f["action"] == "delete" and f["reasons"] == [] for f in released.values()), files
