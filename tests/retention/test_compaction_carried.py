"""Compaction jobs that carry idle logs without a look at each (retention/compaction/look_memory.py
`carried`, retention/compaction/compactor.py): a job over logs nothing touched makes no
`WatchedLog` and asks no protector; an unkeyed log without a marks file is judged without opening
it, so a cold job leaves every directory clean for the deletion passes, and is looked at again only
when a marks file comes or its directory's identity, mode or owner changes; each change to a log
with marks gets it looked at; a protector that does not say its answers live in the log directory is asked every job;
and through random changes, every log a job should compact is compacted, with the pending ranges
of that moment. Real logs, real SQLite,
real inotify through a scheduler's roll watch; the racy-mtime rule is waited out."""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import pytest

from commitlog import CommitLog
from retention import RetentionScheduler
from retention.compaction import compactor, protection
from retention.compaction.look_memory import CompactionMemory
from retention.scheduling.metrics import PassKind

from retention_helpers import make_log
from test_unchanged_compaction import RACY, _config
from test_unchanged_compaction_marks import scheduler_of  # noqa: F401 (a fixture)


class _FileProtector:
    """A protector whose pending ranges are `<log>/pending.json` (a list of [start, end])."""

    name = "file"

    def __init__(self, in_directory: bool) -> None:
        self.decided_in_log_directory = in_directory
        self.asked: list[str] = []

    def pending_ranges(self, log_path):
        self.asked.append(os.path.basename(log_path))
        try:
            return [tuple(r) for r in json.loads(Path(log_path, "pending.json").read_text())]
        except FileNotFoundError:
            return []

    def keyed_compaction_refusal(self, log_path):
        return None


@pytest.fixture
def protector(monkeypatch):
    """The one installed protector: `_FileProtector(True)` (set `.decided_in_log_directory`)."""
    found = _FileProtector(True)
    monkeypatch.setattr(protection, "_loaded", [found])
    return found


class _Jobs:
    """`compact:default` jobs of a scheduler's one filesystem, telling which logs each looked at
    (its memory's look did not stand), which it made a `WatchedLog` of (not carried: `.made`) and
    which it compacted (`.dead`: the dead records each dropped)."""

    def __init__(self, scheduler: RetentionScheduler, monkeypatch) -> None:
        self.scheduler = scheduler
        self.made: set[str] = set()
        self.looked: set[str] = set()
        missing, unchanged = compactor._WatchedLogs.__missing__, CompactionMemory.unchanged

        def made(logs, name):
            self.made.add(name)
            return missing(logs, name)

        def looked(memory, w, *args):
            stands = unchanged(memory, w, *args)
            if not stands:
                self.looked.add(w.name)
            return stands
        monkeypatch.setattr(compactor._WatchedLogs, "__missing__", made)
        monkeypatch.setattr(CompactionMemory, "unchanged", looked)

    def __call__(self) -> tuple[set[str], set[str]]:
        self.made, self.looked = set(), set()
        dev = next(iter(self.scheduler._state.filesystems))
        result = self.scheduler.compactions.run(dev, kind=PassKind.INTERVAL, policy="default")
        self.dead = {log.name: sum(o.dropped["dead"] for o in log.outputs) for log in result.logs if log.outputs}
        return self.looked, set(self.dead)

    def settle(self) -> None:
        for _ in range(6):
            time.sleep(RACY)
            if self()[0] == set():
                return
        raise AssertionError("logs are looked at every compaction job")


def _kill_first_segment(log: CommitLog) -> None:
    sealed = [s for s in log.segments() if not s.active]
    first = next(s for s in sealed if s.end_offset > s.base_offset and s.live_bytes != 0)
    log.mark_dead(range(first.base_offset, first.end_offset))


def test_an_idle_job_makes_no_watched_log_and_asks_no_protector(tmp_path, scheduler_of, protector, monkeypatch):
    names = [f"log{i}" for i in range(5)]
    for n in names:
        make_log(tmp_path / n, 2)
    jobs = _Jobs(scheduler_of(tmp_path, names), monkeypatch)
    jobs.settle()
    protector.asked.clear()
    assert jobs() == (set(), set())
    assert jobs.made == set(), "no log was looked at one by one"
    assert protector.asked == [], "a carried log's pending ranges are not asked"
    memory = next(iter(jobs.scheduler.compactions._memory.values()))
    carried = memory.carried_logs
    jobs()
    assert memory.carried_logs == carried + len(names)


def test_a_cold_job_over_unkeyed_logs_without_marks_leaves_them_clean_for_the_deletion_passes(tmp_path, scheduler_of,
                                                                                              protector):
    names = [f"log{i}" for i in range(4)]
    for n in names:
        make_log(tmp_path / n, 2)
    scheduler = scheduler_of(tmp_path, names)
    memory = None
    for _ in range(4):
        time.sleep(RACY)
        scheduler.passes.interval("default")
        memory = next(iter(scheduler._state.filesystems.values())).cleaner.memory
        keyed = memory.keyed
        time.sleep(RACY)
        scheduler.passes.interval("default")
        if memory.keyed == keyed:
            break
    else:
        raise AssertionError("the deletion passes key logs every pass")
    scheduler.compactions.job("default")                     # a cold look at every log
    assert not any((tmp_path / n / "state.db-wal").exists() for n in names), "no log was opened"
    keyed = memory.keyed
    time.sleep(RACY)
    scheduler.passes.interval("default")
    assert memory.keyed == keyed, "the compaction job's look marked no directory dirty"


def _mark_last_record(path: Path) -> None:
    """A marks file whose one mark is in the active segment: nothing a compaction may drop."""
    with CommitLog.open(path, flush="none") as log:
        log.mark_dead([log.end_offset - 1])


def test_each_change_to_a_carried_log_gets_it_looked_at(tmp_path, scheduler_of, protector, monkeypatch):
    names = ["untouched", "marks", "pending", "created", "chmod"]
    for n in names:
        make_log(tmp_path / n, 2)
    for n in ("untouched", "pending", "created", "chmod"):
        _mark_last_record(tmp_path / n)       # with marks, its look depends on every file it has
    scheduler = scheduler_of(tmp_path, names)
    jobs = _Jobs(scheduler, monkeypatch)
    jobs.settle()
    with CommitLog.open(tmp_path / "marks", flush="none") as log:
        _kill_first_segment(log)
    (tmp_path / "pending" / "pending.json").write_text(json.dumps([[0, 2**62]]))   # a job began
    (tmp_path / "created" / "notes.txt").write_text("a file created in the log directory")
    os.chmod(tmp_path / "chmod", 0o750)
    time.sleep(RACY)
    looked, compacted = jobs()
    assert looked == {"marks", "pending", "created", "chmod"}
    assert compacted == {"marks"}
    jobs.settle()
    with CommitLog.open(tmp_path / "pending", flush="none") as log:
        _kill_first_segment(log)                             # dead, but a pending range keeps it
    time.sleep(RACY)
    assert jobs() == ({"pending"}, set()), "not rewritten: it would drop nothing"
    jobs.settle()
    (tmp_path / "pending" / "pending.json").write_text("[]")  # the job ended
    time.sleep(RACY)
    assert jobs() == ({"pending"}, {"pending"}) and jobs.dead["pending"] > 0
    jobs.settle()
    scheduler.reload(_config(tmp_path, names))               # new settings objects, equal to the old
    scheduler.disk_check.watch()
    time.sleep(RACY)
    jobs()
    assert jobs.made == set(names), "after a reload each log is looked at one by one once"
    jobs()
    assert jobs.made == set(), "then carried again"


def test_an_unkeyed_log_without_marks_is_looked_at_only_when_one_comes_or_its_directory_changes(
        tmp_path, scheduler_of, protector, monkeypatch):
    """Its look plans nothing whatever else it holds: its key is its directory's identity, mode and
    owner and the absence of a marks file, and its pending ranges are not asked."""
    names = ["created", "pending", "chmod", "marks"]
    for n in names:
        make_log(tmp_path / n, 2)
    jobs = _Jobs(scheduler_of(tmp_path, names), monkeypatch)
    jobs.settle()
    (tmp_path / "created" / "notes.txt").write_text("a file created in the log directory")
    (tmp_path / "pending" / "pending.json").write_text(json.dumps([[0, 2**62]]))
    os.chmod(tmp_path / "chmod", 0o750)
    with CommitLog.open(tmp_path / "marks", flush="none") as log:
        _kill_first_segment(log)
    time.sleep(RACY)
    protector.asked.clear()
    assert jobs() == ({"chmod", "marks"}, {"marks"})
    assert set(protector.asked) == {"marks"}, "only a log with marks has its pending ranges asked"
    jobs.settle()
    assert jobs() == (set(), set()) and jobs.made == set(), "every one carried again"


def test_a_carried_log_is_looked_at_when_its_young_dead_segment_comes_of_age(tmp_path, protector, monkeypatch):
    make_log(tmp_path / "a", 2)
    ahead = [0.0]                                  # seconds the scheduler's wall clock runs ahead
    scheduler = RetentionScheduler(_config(tmp_path, ["a"], min_age="60s"), watch_rolls=True,
                                   clock=lambda: time.time() + ahead[0])
    try:
        scheduler.disk_check.watch()
        jobs = _Jobs(scheduler, monkeypatch)
        with CommitLog.open(tmp_path / "a", flush="none") as log:
            _kill_first_segment(log)               # dead, but younger than min_age
        time.sleep(RACY)
        assert jobs() == ({"a"}, set()), "looked at: too young to compact"
        for _ in range(4):     # the writer's last events, late under load, may get it looked at again
            looked, compacted = jobs()
            assert compacted == set(), "too young to compact"
            if looked == set() and jobs.made == set():
                break
            time.sleep(RACY)
        else:
            raise AssertionError("not carried until it comes of age")
        ahead[0] = 90.0
        assert jobs() == ({"a"}, {"a"}), "its deadline passed: looked at and compacted"
    finally:
        scheduler.stop()


def test_a_keyed_log_s_tail_written_through_its_mapping_gets_it_looked_at(tmp_path, scheduler_of, protector,
                                                                          monkeypatch):
    keys = [b"k%d" % i for i in range(9)]
    with CommitLog.open(tmp_path / "keyed", segment_size=4096, flush="none") as log:   # its writer, open throughout
        for key in keys:
            log.append(b"v" * 380, key=key)
        while len(log.segments()) < 2:
            log.append(b"x" * 100, key=b"x%d" % log.end_offset)
        jobs = _Jobs(scheduler_of(tmp_path, ["keyed"], keys="true"), monkeypatch)
        jobs.settle()
        segments = len(log.segments())
        for key in keys:                          # the first segment superseded whole, no roll
            log.append(b"new", key=key)
        assert len(log.segments()) == segments
        time.sleep(RACY)
        assert jobs() == ({"keyed"}, {"keyed"})


def test_a_protector_that_does_not_say_where_its_answers_live_is_asked_every_job(tmp_path, scheduler_of, protector,
                                                                                monkeypatch):
    protector.decided_in_log_directory = False
    names = ["a", "b"]
    for n in names:
        make_log(tmp_path / n, 2)
        _mark_last_record(tmp_path / n)           # a log without marks is never asked
    jobs = _Jobs(scheduler_of(tmp_path, names), monkeypatch)
    for _ in range(3):
        time.sleep(RACY)
        jobs()
    protector.asked.clear()
    assert jobs() == (set(), set()), "its memory's look stands"
    assert jobs.made == set(names), "but each log is looked at one by one"
    assert sorted(protector.asked) == names


def test_the_spark_protector_says_its_answers_live_in_the_log_directory():
    from commitlog.spark.protector import PROTECTOR
    assert PROTECTOR.decided_in_log_directory is True


@pytest.mark.parametrize("seed", [0, *(pytest.param(seed, marks=pytest.mark.fuzz) for seed in range(1, 6))])
def test_through_random_changes_every_job_compacts_exactly_the_logs_given_something_to_compact(
        tmp_path, scheduler_of, protector, monkeypatch, seed):
    rng = random.Random(seed)
    names = [f"log{i}" for i in range(6)]
    for n in names:
        make_log(tmp_path / n, 6)
    scheduler = scheduler_of(tmp_path, names)
    jobs = _Jobs(scheduler, monkeypatch)
    writers = {n: CommitLog.open(tmp_path / n, flush="none") for n in names}
    pending: dict[str, bool] = dict.fromkeys(names, False)
    owed: set[str] = set()                # logs with a segment marked dead and not dropped yet
    try:
        jobs.settle()
        for step in range(8):
            for name in rng.sample(names, rng.randint(0, 3)):
                change = rng.choice(["kill", "kill", "pending", "release", "append", "commit", "file"])
                log = writers[name]
                if change == "kill" and sum(not s.active for s in log.segments()) > 1:
                    _kill_first_segment(log)
                    owed.add(name)
                elif change == "pending":
                    (tmp_path / name / "pending.json").write_text(json.dumps([[0, 2**62]]))
                    pending[name] = True
                elif change == "release":
                    (tmp_path / name / "pending.json").write_text("[]")
                    pending[name] = False
                elif change == "append":
                    log.append_batch([b"x" * 100] * rng.randint(1, 60))
                elif change == "commit":
                    log.commit("etl", rng.randint(0, log.end_offset))
                else:
                    (tmp_path / name / f"note{step}").write_text("x")
            if rng.random() < 0.3:
                scheduler.passes.interval("default")
            time.sleep(RACY)
            compacted = jobs()[1]
            # A segment whose dead records a pending range keeps is not rewritten: compacted once
            # that range is let go, its dead records dropped then.
            assert compacted == {n for n in owed if not pending[n]}, f"step {step}"
            assert all(jobs.dead.values()), f"step {step}: an output dropped nothing"
            owed -= compacted
    finally:
        for w in writers.values():
            w.close()
