"""Spark's dead records reach the store (commitlog.spark.ledger.marking): an aborted job, failed and
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
from commitlog.spark.writing.appender import Appender
from commitlog.spark.ledger.ledger import Ledger
from commitlog.spark.source_options import Options
from commitlog.spark.schema import arrow_schema
from commitlog.spark.source import stored_schema
from commitlog.spark.reading.stream import CommitLogStreamReader
from commitlog.spark.writing.target import prepare_write
from commitlog.spark.writing.batch_writer import AppendedMessage, CommitLogBatchWriter
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
def _fail_partition(bad: int, log_path: str, finished: int):
    """Partition `bad` fails once `finished` writers of the log have finished their task (the
    other task of the job wrote its records and finished: a wait on that, not a sleep)."""
    def fn(batches):
        import time

        from pyspark import TaskContext
        if TaskContext.get().partitionId() == bad:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                with Ledger(log_path) as ledger:
                    (done,), = ledger._query("SELECT count(*) FROM writers WHERE finished_at IS NOT NULL")
                if done >= finished:
                    break
                time.sleep(0.05)
            raise RuntimeError("boom: a task of the job failed")
        yield from batches
    return fn


def test_an_aborted_jobs_records_are_marked_and_compaction_gives_their_disk_bytes_back(
        spark, log_path):
    stage(spark.range(0, 1000, numPartitions=1), log_path, segmentSize=4096, recordBytes=512)
    failing = spark.range(5000, 7000, numPartitions=2).mapInArrow(_fail_partition(1, log_path, 2), "id bigint")
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


# ---------------------------------------------------------------------- failed task attempts
def _wait_for(predicate, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_failed_and_sigkilled_task_attempts_records_are_marked(spark, log_path, tmp_path):
    stage(spark.range(0, 10, numPartitions=1), log_path)
    target = _target(spark, log_path)
    # An attempt whose task raises after three batches: the task itself declares it dead and marks.
    with pytest.raises(RuntimeError, match="attempt failed"):
        _attempt(target, range(100, 110), fail_after=3)
    (_, _, raised), = _writers(log_path, "dead")
    assert len(raised) == 3 and marked_offsets(log_path) == raised

    # An attempt SIGKILLed mid-write in its own process: its writer stays `writing`, pending.
    pickled = tmp_path / "target.pickle"
    pickled.write_bytes(pickle.dumps(target))
    child = subprocess.Popen([sys.executable, ATTEMPT_CHILD, str(pickled), "200"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: [w for w in _writers(log_path, "writing") if len(w[2]) >= 3],
                  "the child attempt to append")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    (_, first, killed), = _writers(log_path, "writing")
    assert pending_ranges(log_path) == [(first, OPEN_END)]   # it may have appended anywhere above

    # The retried attempt succeeds; the driver commits it: the job's other attempts are dead.
    CommitLogBatchWriter(target).commit([_attempt(target, range(300, 305))])
    assert pending_ranges(log_path) == []
    assert dead_offsets(log_path) == sorted(raised + killed)
    assert marked_offsets(log_path) == sorted(raised + killed)
    assert ids(load(spark, log_path)) == list(range(10)) + list(range(300, 305))


def test_an_attempt_still_appending_after_its_job_committed_has_every_record_marked(
        spark, log_path):
    stage(spark.range(0, 1, numPartitions=1), log_path)
    target = _target(spark, log_path)
    gate = threading.Event()
    failure: list[BaseException] = []

    def slow_attempt():      # a speculative attempt: two batches, then held back, then two more
        try:
            _attempt(target, range(100, 104), gate=gate)
        except BaseException as exc:  # noqa: BLE001 - checked below
            failure.append(exc)

    thread = threading.Thread(target=slow_attempt)
    thread.start()
    try:
        _wait_for(lambda: [w for w in _writers(log_path, "writing") if len(w[2]) == 2],
                  "the slow attempt's first records")
        CommitLogBatchWriter(target).commit([_attempt(target, range(200, 202))])
        (slow, _, early), = _writers(log_path, "dead")
        assert marked_offsets(log_path) == early          # marked when the job committed
    finally:
        gate.set()
        thread.join(60)
    assert failure and "dead" in str(failure[0])          # its finish is refused...
    (_, _, late), = _writers(log_path, "dead")
    assert len(late) == 4 and marked_offsets(log_path) == late   # ...and its later records marked
    with Ledger(log_path) as ledger:
        assert ledger.unmarked_dead() == {}
    assert ids(load(spark, log_path)) == [0, 200, 201]


# ---------------------------------------------------------------------- duplicate micro-batch
def _sink_query(spark, source: str, sink: str, checkpoint: str):
    query = (spark.readStream.format("commitlog").option("path", source)
             .option("maxRowsPerTrigger", "1").load()
             .writeStream.format("commitlog").option("path", sink).option("segmentSize", "4096")
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert not query.isActive and query.exception() is None, query.exception()


def test_a_duplicate_micro_batchs_records_are_marked_and_compacted_away(spark, tmp_path):
    source, sink, checkpoint = (str(tmp_path / n) for n in ("source", "sink", "checkpoint"))
    stage(spark.range(0, 300, numPartitions=3), source)       # 3 records: 3 micro-batches
    _sink_query(spark, source, sink, checkpoint)
    # Killed after the sink committed micro-batch 2, before Spark recorded it: it runs again.
    for name in ("2", ".2.crc"):
        os.unlink(os.path.join(checkpoint, "commits", name))
    _sink_query(spark, source, sink, checkpoint)
    assert [j.batch_id for j in jobs(sink) if j.reason and "duplicate" in j.reason] == [2]
    dead = dead_offsets(sink)
    assert dead and marked_offsets(sink) == dead
    assert ids(load(spark, sink)) == list(range(300))          # each row once
    stage(spark.range(300, 600, numPartitions=3), sink)        # seals the duplicate's segment
    outputs, active = _compact(sink)
    assert max(dead) < active
    assert sum(o.dropped.get("dead", 0) for o in outputs) == len(dead)
    assert ids(load(spark, sink)) == list(range(600))


# ---------------------------------------------------------------------- a stream across compaction
def _stream(spark, path: str, out: str, checkpoint: str):
    query = (spark.readStream.format("commitlog").option("path", path).option("group", "etl")
             .option("maxRowsPerTrigger", "7").load()
             .writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert not query.isActive and query.exception() is None, query.exception()


def test_a_stream_resumes_across_a_compaction_and_reads_the_rest_exactly_once(
        spark, log_path, tmp_path):
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    stage(spark.range(0, 1, numPartitions=1), log_path, segmentSize=4096)
    _job(spark, log_path, range(1, 20), commit=True)
    _job(spark, log_path, range(1000, 1020), commit=False)
    _job(spark, log_path, range(20, 40), commit=True)
    _stream(spark, log_path, out, checkpoint)                   # several micro-batches of 7 rows
    with CommitLog.open(log_path, readonly=True) as log:
        resume_at = log.committed()["etl"]
    assert resume_at == _writers(log_path, "committed")[-1][2][-1] + 1   # all consumed
    # Meanwhile: an aborted job right where the stream stopped, new rows, another aborted job.
    _job(spark, log_path, range(2000, 2040), commit=False)
    _job(spark, log_path, range(40, 60), commit=True)
    _job(spark, log_path, range(3000, 3040), commit=False)
    _job(spark, log_path, range(60, 80), commit=True)
    dead = dead_offsets(log_path)
    assert resume_at in dead and marked_offsets(log_path) == dead
    outputs, active = _compact(log_path)
    assert sum(o.dropped.get("dead", 0) for o in outputs) == len([o for o in dead if o < active])
    with CommitLog.open(log_path, readonly=True) as log:
        with pytest.raises(OffsetRemovedError):
            log.read(resume_at)                                 # the stream resumes in a gap
    _stream(spark, log_path, out, checkpoint)
    got = sorted(r.id for r in spark.read.parquet(out).collect())
    assert got == list(range(80))                               # every row exactly once
    with CommitLog.open(log_path, readonly=True) as log:
        assert log.committed()["etl"] > max(o for o in dead)


# ---------------------------------------------------------------------- the catch-up
def _open_as_write(spark, path):
    stage(spark.range(500, 501, numPartitions=1), path)


def _open_as_read(spark, path):
    load(spark, path).count()


def _open_as_stream(spark, path):
    opts = Options.parse({"path": path, "group": "etl"})
    reader = CommitLogStreamReader(opts, arrow_schema(stored_schema(path)))
    try:
        reader.initialOffset()
    finally:
        reader.stop()


@pytest.mark.parametrize("reopen", [_open_as_write, _open_as_read, _open_as_stream],
                         ids=["write", "read", "stream"])
def test_the_catch_up_marks_what_a_crash_left_unmarked(spark, log_path, reopen):
    stage(spark.range(0, 5, numPartitions=1), log_path)
    target = _target(spark, log_path)
    _attempt(target, range(100, 104))
    with Ledger(log_path) as ledger:     # the ledger's abort, then a crash before the mark
        ledger.abort_job(target.job_id, "aborted, then the driver was killed")
        todo = ledger.unmarked_dead()
    (dead,) = todo.values()
    assert len(dead) == 4 and marked_offsets(log_path) == []
    reopen(spark, log_path)
    assert marked_offsets(log_path) == dead
    with Ledger(log_path) as ledger:
        assert ledger.unmarked_dead() == {}
        # A crash after the mark, before the flag: the next catch-up marks nothing twice.
        with ledger._tx() as db:
            db.execute("UPDATE writers SET marked = 0")
        assert mark_dead_records(log_path, ledger) == 0
        assert ledger.unmarked_dead() == {}
    assert marked_offsets(log_path) == dead
    assert ids(load(spark, log_path)) == list(range(5)) + ([500] if reopen is _open_as_write else [])


# ---------------------------------------------------------------------- beside a writer; pending
WRITER_CHILD = """
import sys, time
from commitlog import CommitLog
log = CommitLog.open(sys.argv[1])
print("open", flush=True)
deadline = time.monotonic() + float(sys.argv[2])
n = 0
while time.monotonic() < deadline:
    log.append(b"another application's record %d" % n)
    n += 1
log.close()
print(n, flush=True)
"""


def test_marking_works_while_another_process_writes_the_log(spark, log_path):
    stage(spark.range(0, 3, numPartitions=1), log_path)
    target = _target(spark, log_path)
    _attempt(target, range(100, 110))
    with Ledger(log_path) as ledger:
        ledger.abort_job(target.job_id, "aborted; marking comes later")
    child = subprocess.Popen([sys.executable, "-c", WRITER_CHILD, log_path, "3"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "open"       # it holds the writer lock
        with CommitLog.open(log_path, readonly=True) as log:
            end = log.end_offset
            assert mark_dead_records(log_path) == 10
            time.sleep(0.2)
            assert log.end_offset > end                          # it kept appending
        appended = int(child.stdout.readline())
    finally:
        child.wait(60)
    assert child.returncode == 0 and appended > 0
    assert marked_offsets(log_path) == dead_offsets(log_path)
    with CommitLog.open(log_path, readonly=True) as log:
        values = [bytes(r.value) for r in log.scan()]
    assert len([v for v in values if v.startswith(b"another application")]) == appended
    assert ids(load(spark, log_path)) == [0, 1, 2]


def test_pending_ranges_follow_unfinished_writers(spark, log_path, tmp_path):
    assert pending_ranges(str(tmp_path / "no-log")) == []
    stage(spark.range(0, 1, numPartitions=1), log_path)
    os.unlink(os.path.join(log_path, "spark.db"))
    assert pending_ranges(log_path) == [] and not os.path.exists(os.path.join(log_path, "spark.db"))
    stage(spark.range(0, 1, numPartitions=1), log_path)
    target = _target(spark, log_path)
    message = _attempt(target, range(10, 13))          # written, not committed: exact offsets
    (_, _, written), = _writers(log_path, "written")
    assert pending_ranges(log_path) == [(written[0], written[-1] + 1)]
    CommitLogBatchWriter(target).commit([message])
    assert pending_ranges(log_path) == []


def test_pending_ranges_import_neither_pyspark_nor_pyarrow(spark, log_path):
    stage(spark.range(0, 1, numPartitions=1), log_path)
    code = ("import sys; from commitlog.spark.ledger.marking import pending_ranges; "
            f"assert pending_ranges({log_path!r}) == []; "
            "import commitlog.spark; commitlog.spark.jobs; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('pyspark', 'pyarrow', 'pandas')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_ledger_from_before_marks_gains_the_flag_and_its_dead_records_are_marked(
        spark, log_path):
    import sqlite3
    stage(spark.range(0, 5, numPartitions=1), log_path)
    target = _target(spark, log_path)
    _attempt(target, range(100, 103))
    with Ledger(log_path) as ledger:
        ledger.abort_job(target.job_id, "aborted by a version that did not mark")
    db = sqlite3.connect(os.path.join(log_path, "spark.db"))   # the writers table as it was
    db.executescript("DROP INDEX writers_unmarked; ALTER TABLE writers DROP COLUMN marked;")
    db.close()
    assert marked_offsets(log_path) == []
    assert ids(load(spark, log_path)) == list(range(5))          # a read opens and catches up
    assert marked_offsets(log_path) == dead_offsets(log_path) and len(dead_offsets(log_path)) == 3


@pytest.mark.parametrize("small_fs", [("tmpfs", 4 << 20)], indirect=True)
def test_no_room_to_mark_never_fails_a_commit_and_the_marks_come_later(spark, small_fs, caplog):
    path = f"{small_fs}/staging"
    stage(spark.range(0, 5, numPartitions=1), path, segmentSize="256KiB")
    target = _target(spark, path)
    left_out = _attempt(target, range(100, 103))     # a duplicate attempt the commit leaves out
    chosen = _attempt(target, range(200, 203))
    assert not os.path.exists(os.path.join(path, "marks"))
    held = Ledger(path)      # keeps spark.db's WAL file (the last connection's close removes it)
    try:
        # SQLite's next commits overwrite WAL space it already has; the marks file needs new space.
        with held._tx() as db:
            db.execute("INSERT INTO staging_meta VALUES ('room', ?)", ("x" * (1 << 20),))
        with held._tx() as db:
            db.execute("DELETE FROM staging_meta WHERE key = 'room'")
        held._query("PRAGMA wal_checkpoint(RESTART)")
        st = os.statvfs(small_fs)
        with open(os.path.join(small_fs, "ballast"), "wb") as f:   # 8 KiB left: below a marks step
            f.write(b"\0" * (st.f_bavail * st.f_frsize - (8 << 10)))
        CommitLogBatchWriter(target).commit([chosen])     # the mark fails; the commit does not
        assert left_out.writer_id in held.unmarked_dead()
        assert marked_offsets(path) == []
        assert "no space left to record marks" in caplog.text
        os.unlink(os.path.join(small_fs, "ballast"))
    finally:
        held.close()
    assert ids(load(spark, path)) == list(range(5)) + list(range(200, 203))   # and catches up
    assert marked_offsets(path) == dead_offsets(path) and len(dead_offsets(path)) == 3
