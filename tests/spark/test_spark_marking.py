"""Spark's dead records reach the store (commitlog.spark.marking): an aborted job, failed and
SIGKILLed task attempts, a duplicate micro-batch and an attempt outlived by its job are marked dead
when the ledger decides it, a crash between the two is caught up when the log is opened again, a
compaction then gives their bytes back while Spark reads the same rows and a stream resumes; the
pending ranges retention asks for need no pyspark."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone

import pyarrow as pa
import pytest

from commitlog import CommitLog, OffsetRemovedError, parse_segment_name
from commitlog.spark import dead_offsets, jobs, mark_dead_records, pending_ranges
from commitlog.spark import read as fast_read
from commitlog.spark.appender import Appender
from commitlog.spark.ledger import Ledger
from commitlog.spark.options import Options
from commitlog.spark.schema import arrow_schema
from commitlog.spark.source import stored_schema
from commitlog.spark.stream import CommitLogStreamReader
from commitlog.spark.target import prepare_write
from commitlog.spark.writer import AppendedMessage, CommitLogBatchWriter
from policies.config import CompactionConfig
from policies.liveness import LivenessRule, PendingRanges

from spark_helpers import ids, load, marked_offsets, stage

pytestmark = pytest.mark.spark

ATTEMPT_CHILD = os.path.join(os.path.dirname(__file__), "attempt_child.py")
OPEN_END = 1 << 63


# ---------------------------------------------------------------------- driving a job by hand
# The driver's and the tasks' own code (prepare_write, Appender, CommitLogBatchWriter), called
# without a Spark job: what Spark would call, at the instants a test needs.
def _target(spark, path: str):
    """A new batch job on the log (its schema: `id bigint`); one record per one-row batch."""
    opts = Options.parse({"path": path, "flushBytes": "1", "recordBytes": "1"})
    return prepare_write(opts, spark.range(0, 1).schema, "batch")


def _rows(numbers, fail_after: int | None = None, gate: threading.Event | None = None):
    for i, n in enumerate(numbers):
        if i == fail_after:
            raise RuntimeError("the task attempt failed")
        if gate is not None and i == 2:
            gate.wait(60)
        yield pa.record_batch([pa.array([n], pa.int64())], names=["id"])


def _attempt(target, numbers, **kw) -> AppendedMessage:
    return AppendedMessage(*Appender(target).write_all(_rows(numbers, **kw)))


def _job(spark, path: str, numbers, *, commit: bool) -> None:
    target = _target(spark, path)
    writer = CommitLogBatchWriter(target)
    message = _attempt(target, numbers)
    (writer.commit if commit else writer.abort)([message])


def _writers(path: str, state: str) -> list[tuple[str, int, list[int]]]:
    """(writer id, first offset, offsets) of the writers in `state`."""
    with Ledger(path) as ledger:
        found = ledger._query("SELECT writer_id, first_offset FROM writers WHERE state = ? "
                              "ORDER BY first_offset", (state,))
        return [(w, first, [o for o, in ledger._query(
            "SELECT offset FROM records WHERE writer_id = ? ORDER BY offset", (w,))])
            for w, first in found]


def _disk_bytes(path: str) -> int:
    """Bytes the log's segment files take on disk (allocated blocks)."""
    return sum(os.stat(os.path.join(path, n)).st_blocks * 512 for n in os.listdir(path)
               if parse_segment_name(n) is not None)


def _compact(path: str):
    """Compact every sealed segment under the one liveness rule, with Spark's pending ranges, as
    retention does: segments chosen first, then the pending ranges, then the marks. Returns the
    outputs and the active segment's base (every offset below it was decided)."""
    with CommitLog.open(path, readonly=True) as log:
        segments = log.segments()
        sealed = [s.base_offset for s in segments[:-1]]
        rule = LivenessRule(CompactionConfig(), datetime.now(timezone.utc),
                            pending=PendingRanges(pending_ranges(path)))
        outputs = log.compact([[b] for b in sealed], rule.cause, marks=log.marks_snapshot())
        return outputs, segments[-1].base_offset


# ---------------------------------------------------------------------- aborted job, compaction
def _fail_partition(bad: int):
    def fn(batches):
        import time

        from pyspark import TaskContext
        if TaskContext.get().partitionId() == bad:
            time.sleep(2)        # the other task writes its records and finishes meanwhile
            raise RuntimeError("boom: a task of the job failed")
        yield from batches
    return fn


def test_an_aborted_jobs_records_are_marked_and_compaction_gives_their_disk_bytes_back(
        spark, log_path):
    stage(spark.range(0, 1000, numPartitions=1), log_path, segmentSize=4096, recordBytes=512)
    failing = spark.range(5000, 7000, numPartitions=2).mapInArrow(_fail_partition(1), "id bigint")
    with pytest.raises(Exception, match="boom"):
        stage(failing, log_path, recordBytes=512)
    stage(spark.range(1000, 2000, numPartitions=1), log_path, recordBytes=512)
    dead = dead_offsets(log_path)
    assert len(dead) >= 8                              # the finished task's records
    assert marked_offsets(log_path) == dead            # marked when the job aborted
    assert [j.state for j in jobs(log_path)] == ["committed", "aborted", "committed"]
    assert pending_ranges(log_path) == []              # no job left unfinished
    expected = list(range(2000))
    assert ids(load(spark, log_path)) == expected

    with Ledger(log_path) as ledger:
        sizes = dict(ledger._query("SELECT offset, bytes FROM records"))
    before = _disk_bytes(log_path)
    outputs, active = _compact(log_path)
    after = _disk_bytes(log_path)
    decided = [o for o in dead if o < active]          # those in sealed segments
    assert len(decided) >= 8
    assert sum(o.dropped.get("dead", 0) for o in outputs) == len(decided)
    assert sum(o.kept for o in outputs) > 0            # committed records share those segments
    assert any(o.segment is None for o in outputs)     # a segment of dead records only: a gap
    assert before - after >= sum(sizes[o] for o in decided)   # their bytes came back on disk
    assert ids(load(spark, log_path)) == expected       # the same rows, exactly
    assert ids(fast_read(spark, log_path)) == expected
    with CommitLog.open(log_path, readonly=True) as log:
        with pytest.raises(OffsetRemovedError):
            log.read(dead[0])
