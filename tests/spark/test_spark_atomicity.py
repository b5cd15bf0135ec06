"""Atomic batch jobs: a failed job leaves no visible row and its records dead; concurrent jobs
from separate python workers both land whole; tasks wait for another writer of the log."""

from __future__ import annotations

import threading
import time

import pytest

from commitlog import CommitLog
from commitlog.spark import dead_offsets, jobs
from commitlog.spark.ledger.ledger import Ledger
from commitlog.spark.ledger.marking import mark_dead_records

from spark_helpers import ids, load, marked_offsets, spark_records, stage

pytestmark = pytest.mark.spark


def _fail_in_partition(bad: int, after_batches: int, log_path: str | None = None, landed: int = 0):
    """A mapInArrow function whose partition `bad` raises before its batch `after_batches`; with
    `log_path`, only once the log's end offset has reached `landed` (the job's earlier batches
    appended by the writer, another python worker fed by the JVM), so the job really fails after
    writing, however loaded the machine."""
    def fn(batches):
        import time

        from pyspark import TaskContext
        partition = TaskContext.get().partitionId()
        for n, batch in enumerate(batches):
            if partition == bad and n == after_batches:
                deadline = time.monotonic() + 120
                while log_path is not None and time.monotonic() < deadline:
                    from commitlog import CommitLog
                    with CommitLog.open(log_path, readonly=True) as log:
                        if log.end_offset >= landed:
                            break
                    time.sleep(0.1)
                raise RuntimeError("boom: a task failing after writing some batches")
            yield batch
    return fn


def _settled_records(log_path) -> list:
    """The log's records once no task of a failed job is still appending (the same for a second)."""
    records, deadline = spark_records(log_path), time.monotonic() + 120
    while time.monotonic() < deadline:
        time.sleep(1)
        again = spark_records(log_path)
        if again == records:
            break
        records = again
    return records


def test_a_job_whose_task_raises_after_writing_leaves_nothing_visible(spark, log_path):
    stage(spark.range(0, 10, numPartitions=1), log_path)          # an earlier, committed job
    before = spark_records(log_path)
    df = spark.range(10, 100_010, numPartitions=2) \
        .mapInArrow(_fail_in_partition(bad=1, after_batches=3, log_path=str(log_path), landed=13), "id bigint")
    with pytest.raises(Exception, match="boom"):
        # flushBytes=1: every batch is appended at once, so the failing task really wrote some.
        stage(df, log_path, flushBytes=1, recordBytes=1)
    records = _settled_records(log_path)    # Spark cancels the other task after the abort
    failed_job = [(o, w) for o, w in records if (o, w) not in before]
    assert len(failed_job) >= 3                          # batches of the failing task landed
    assert dead_offsets(log_path) == [o for o, _ in failed_job]   # ...and are all dead
    mark_dead_records(str(log_path))    # the catch-up every open runs: records that landed after
    assert marked_offsets(log_path) == [o for o, _ in failed_job]  # the abort are in the store too
    assert ids(load(spark, log_path)) == list(range(10))  # nothing of the job is visible
    states = [j.state for j in jobs(log_path)]
    assert states == ["committed", "aborted"]
    jvm = spark._jvm.java.lang.ProcessHandle.current().pid()
    with Ledger(log_path) as ledger:                       # the driver JVM owns every writer
        owners = {r[0] for r in ledger._query("SELECT owner_pid FROM writers")}
    assert owners == {jvm}
    with Ledger(log_path) as ledger:
        assert ledger.pending_floor() is None            # no writer left unresolved


@pytest.mark.parametrize("small_fs", [("tmpfs", 16 << 20)], indirect=True)
def test_a_full_disk_aborts_the_job_and_leaves_nothing_visible(spark, small_fs):
    path = f"{small_fs}/staging"
    rows = "id", "repeat('x', 40) AS pad"
    stage(spark.range(0, 10, numPartitions=1).selectExpr(*rows), path, segmentSize="1MiB")
    before = spark_records(path)
    too_big = spark.range(10, 400_010, numPartitions=2).selectExpr(*rows)   # ~20 MB
    with pytest.raises(Exception, match="StoreFullError"):
        stage(too_big, path, flushBytes="2MiB")
    failed_job = [o for o, w in spark_records(path) if (o, w) not in before]
    assert failed_job                                      # it had appended before the disk filled
    assert dead_offsets(path) == failed_job
    assert marked_offsets(path) == failed_job   # writes are refused before the disk is full
    assert ids(load(spark, path)) == list(range(10))
    assert [j.state for j in jobs(path)] == ["committed", "aborted"]


def test_concurrent_jobs_from_two_drivers_threads_both_land_whole(spark, log_path, tmp_path):
    stage(spark.range(0, 1, numPartitions=1), log_path)   # create the log first
    n = 300_000                                           # 30 batches a job
    errors: list[BaseException] = []
    barrier = tmp_path / "barrier"
    barrier.mkdir()

    def job(base: int) -> None:
        try:
            # A new thread has no active session in the JVM, where python data sources are
            # looked up: make ours active there.
            spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
            # One task a job: with local[2] and FIFO scheduling both jobs run at once.
            df = spark.range(base, base + n, numPartitions=1) \
                .mapInArrow(_meet_then_pass(str(barrier), str(base)), "id bigint")
            stage(df, log_path, flushBytes=1, recordBytes=1)   # a turn a batch: most interleaving
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=job, args=(base,)) for base in (1_000_000, 2_000_000)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    got = ids(load(spark, log_path))
    assert got == [0] + list(range(1_000_000, 1_000_000 + n)) + list(range(2_000_000, 2_000_000 + n))
    writers = {w for _, w in spark_records(log_path)}
    assert len(writers) == 1 + 1 + 1                      # one writer per task, all committed
    assert dead_offsets(log_path) == []
    offsets_by_job = _offsets_by_writer(log_path)
    interleaved = _interleaved(offsets_by_job)
    assert interleaved, "the two jobs' tasks did not take turns (nothing was concurrent)"


def _meet_then_pass(barrier: str, name: str, parties: int = 2):
    """A mapInArrow function whose task waits until `parties` tasks reached the barrier (a
    directory), then passes batches on slowly: the jobs' writers surely run at the same time.
    Built inside a function so cloudpickle ships it by value (workers cannot import tests)."""
    def meet(batches):
        import os
        import time
        open(os.path.join(barrier, name), "w").close()
        deadline = time.monotonic() + 60
        while len(os.listdir(barrier)) < parties and time.monotonic() < deadline:
            time.sleep(0.01)
        for batch in batches:
            time.sleep(0.01)
            yield batch
    return meet


def _offsets_by_writer(path):
    out: dict[str, list[int]] = {}
    for offset, writer in spark_records(path):
        out.setdefault(writer, []).append(offset)
    return out


def _interleaved(offsets_by_writer) -> bool:
    spans = sorted((min(v), max(v)) for v in offsets_by_writer.values() if len(v) > 1)
    return any(a[1] > b[0] for a, b in zip(spans, spans[1:]))


def test_tasks_wait_for_another_writer_of_the_log(spark, log_path):
    stage(spark.range(0, 1), log_path)
    app = CommitLog.open(log_path)                       # an application holds the writer lock
    app.append(b"the application's record")
    releaser = threading.Timer(3.0, app.close)
    releaser.start()
    started = time.monotonic()
    stage(spark.range(1, 1000), log_path)
    assert time.monotonic() - started >= 2.5             # the tasks waited for it
    releaser.join()
    assert ids(load(spark, log_path)) == list(range(1000))


def test_a_writer_that_cannot_get_its_turn_fails_the_job(spark, log_path):
    stage(spark.range(0, 1), log_path)
    with CommitLog.open(log_path):                       # held for the whole job
        with pytest.raises(Exception, match="lockTimeout"):
            stage(spark.range(1, 10), log_path, lockTimeout=1)
    assert ids(load(spark, log_path)) == [0]
    assert [j.state for j in jobs(log_path)] == ["committed", "aborted"]

