"""SQLite's connection files in a watched log directory (retention/scheduling/rollwatch.py
`_changes_contents`; commitlog/spark/ledger `pending_ranges`' read-only connection): a read of a
log's databases leaves the log clean for the passes, so a Spark staging log with marks is carried
by the compaction jobs after one look, while a write to a database, a ledger's writer among them,
or a `-wal` that comes holding frames still marks it dirty. Real logs, real SQLite, a real Spark
ledger and protector (no pyspark), real inotify through a scheduler's roll watch."""

from __future__ import annotations

import os
import sqlite3
import time

from commitlog import CommitLog
from commitlog.spark.ledger.ledger import Ledger
from commitlog.spark.ledger.marking import pending_ranges

from retention_helpers import make_log
from test_compaction_carried import _Jobs, _kill_first_segment, _mark_last_record
from test_unchanged import RACY
from test_unchanged_compaction_marks import scheduler_of  # noqa: F401 (a fixture)
from test_unchanged_inotify import _pass, _settle, sidecar  # noqa: F401 (a fixture)


def _ledger_with_a_job(path) -> None:
    with Ledger(str(path)) as ledger:          # spark.db made; its last close removes -wal and -shm
        ledger.open_job("j1", "batch", None)


def _assert_carried(jobs: _Jobs, why: str) -> None:
    """Two jobs, each after the events of the one before had time to arrive, carry the log."""
    for _ in range(2):
        time.sleep(RACY)
        assert jobs() == (set(), set()) and jobs.made == set(), why


def test_reads_of_a_log_s_databases_leave_it_clean_and_writes_mark_it_dirty(tmp_path, sidecar):
    names = ["state", "ledger", "shm", "linked"]
    for n in names:
        make_log(tmp_path / n, 2)
        with CommitLog.open(tmp_path / n, flush="none") as log:
            log.commit("etl", 1)                 # state.db, its -wal checkpointed and removed at close
    _ledger_with_a_job(tmp_path / "ledger")
    scheduler, cleaner = sidecar(tmp_path, names)
    _settle(scheduler, cleaner)

    db = sqlite3.connect(f"file:{tmp_path / 'state' / 'state.db'}?mode=ro", uri=True)
    assert db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] > 0
    db.close()                                   # -wal and -shm made, chowned, written, left
    assert pending_ranges(tmp_path / "ledger") == []
    assert (tmp_path / "ledger" / "spark.db-wal").exists(), "the read-only read leaves its -wal"
    time.sleep(RACY)
    assert _pass(scheduler, cleaner) == (set(), 0), "reads changed nothing: no log keyed"

    with open(tmp_path / "shm" / "state.db-shm", "wb") as f:
        f.write(b"\0" * 4096)                    # an index of the -wal, never what the log holds
    frames = tmp_path / "frames"
    frames.write_bytes(b"\1" * 4096)
    os.link(frames, tmp_path / "linked" / "state.db-wal")   # a -wal that comes holding frames
    with Ledger(str(tmp_path / "ledger")) as ledger:
        ledger.register_writer("w1", "j1", 0, None)          # a write: its -wal written
    time.sleep(RACY)
    assert _pass(scheduler, cleaner) == ({"linked", "ledger"}, 2), "the -shm's log carried, the others keyed"
    assert pending_ranges(tmp_path / "ledger") == [(0, 1 << 63)]


def test_a_spark_log_with_marks_is_carried_after_a_look_and_looked_at_when_its_ledger_changes(
        tmp_path, scheduler_of, monkeypatch):
    """The installed Spark protector decides the pending ranges: its read of spark.db makes no
    dirty mark, so the next job carries the log; a writer's registration is a write of the ledger
    and gets the log looked at, and its dead segment waits for the writer's end."""
    make_log(tmp_path / "a", 2)
    _mark_last_record(tmp_path / "a")
    _ledger_with_a_job(tmp_path / "a")
    jobs = _Jobs(scheduler_of(tmp_path, ["a"]), monkeypatch)
    jobs.settle()
    _assert_carried(jobs, "its ledger's read left it clean")

    with Ledger(str(tmp_path / "a")) as ledger:
        ledger.register_writer("w1", "j1", 0, None)
    with CommitLog.open(tmp_path / "a", flush="none") as log:
        _kill_first_segment(log)                 # dead, but the writer's range keeps it
    time.sleep(RACY)
    assert jobs() == ({"a"}, set()), "looked at, nothing dropped under the pending range"
    jobs.settle()
    _assert_carried(jobs, "carried again")

    with Ledger(str(tmp_path / "a")) as ledger:
        ledger.abort_job("j1", "the test ends it", ["w1"])
    time.sleep(RACY)
    assert jobs() == ({"a"}, {"a"}) and jobs.dead["a"] > 0, "the range let go: compacted"
