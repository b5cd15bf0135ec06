"""The compaction job driven by inotify's dirty marks (retention/compaction/look_memory.py with
retention/deletion/changes.py): a log directory no event marked dirty since the compaction passes
last took its key is not keyed again; each change gets it keyed and looked at again, even after a
deletion pass took the key for itself; the compaction passes' safety net takes the key anyway.
Real logs, real SQLite, real inotify through a scheduler's roll watch (as `retention serve` runs
it); the racy-mtime rule is waited out."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from commitlog import CommitLog
from retention import RetentionScheduler
from retention.deletion import changes

from retention_helpers import make_log
from test_unchanged_compaction import RACY, _config


@pytest.fixture
def scheduler_of():
    """A scheduler (not started: the test runs its jobs) with its roll watch on and synced."""
    made = []

    def make(tmp: Path, names, **compaction) -> RetentionScheduler:
        scheduler = RetentionScheduler(_config(tmp, names, **compaction), watch_rolls=True)
        made.append(scheduler)
        scheduler.disk_check.watch()
        return scheduler
    yield make
    for scheduler in made:
        scheduler.stop()


class _Job:
    """Runs `compact:default` jobs of a scheduler, telling which logs each looked at and how many
    keys it took by stats."""

    def __init__(self, scheduler: RetentionScheduler) -> None:
        self.scheduler = scheduler

    def __call__(self) -> tuple[set[str], int]:
        compactions = self.scheduler.compactions
        dev = next(iter(self.scheduler._state.filesystems))
        memory = compactions._memory_of(dev)        # the one the job will use (made now if new)
        keyed, looked, real = memory.keyed, set(), type(memory).unchanged

        def unchanged(w, *args):
            stands = real(memory, w, *args)
            if not stands:
                looked.add(w.name)
            return stands
        memory.unchanged = unchanged
        try:
            compactions.job("default")
        finally:
            del memory.unchanged
        return looked, memory.keyed - keyed

    def settle(self) -> None:
        """A deletion pass and a job, until the job looks at no log and takes no key (a first pass
        or look claims and opens each log, its companions settle, its directory is marked clean)."""
        for _ in range(6):
            self.scheduler.passes.interval("default")
            time.sleep(RACY)      # the pass's own events (a first look opens a log) reach the marks
            if self() == (set(), 0):
                return
        raise AssertionError("logs are looked at or keyed every compaction job")


def test_an_untouched_log_is_not_keyed_and_each_change_gets_it_looked_at_again(tmp_path, scheduler_of):
    changed = ["commit", "marks", "tombstones", "roll", "created", "chmod"]
    names = ["untouched", *changed]
    for n in names:
        make_log(tmp_path / n, 2)
    writers = {n: CommitLog.open(tmp_path / n, flush="none") for n in ("commit", "marks", "tombstones", "roll")}
    try:
        writers["commit"].commit("etl", 1)
        writers["marks"].mark_dead([0])
        writers["tombstones"].note_tombstones({2: time.time()})
        scheduler = scheduler_of(tmp_path, names, keys="true")
        job = _Job(scheduler)
        job.settle()
        time.sleep(RACY)
        assert job() == (set(), 0), "nothing changed: no log looked at, no key taken"

        writers["commit"].commit("etl", 2)                               # state.db, in place
        writers["marks"].mark_dead([1])                                  # marks, in place
        writers["tombstones"].note_tombstones({3: time.time()})          # tombstones, in place
        roll = writers["roll"]
        segments = len(roll.segments())
        while len(roll.segments()) == segments:                         # a segment rolled
            roll.append(b"r" * 100, key=b"k%d" % roll.end_offset)
        (tmp_path / "created" / "notes.txt").write_text("a file created in the log directory")
        os.chmod(tmp_path / "chmod", 0o750)
        time.sleep(RACY)     # each change older than the racy window: the marks and the key tell
        scheduler.passes.interval("default")   # a deletion pass takes the changed logs' keys for itself
        looked, keyed = job()
        assert looked == set(changed), "each change is looked at, the deletion pass's key notwithstanding"
        assert keyed == len(changed), "the untouched log's key is not taken"
        job.settle()
    finally:
        for w in writers.values():
            w.close()


def test_the_compaction_full_check_takes_a_key_no_event_reported(tmp_path, scheduler_of, monkeypatch):
    for n in ("a", "b"):
        make_log(tmp_path / n, 2)
    scheduler = scheduler_of(tmp_path, ["a", "b"])
    job = _Job(scheduler)
    job.settle()
    watch = scheduler.disk_check._rolls
    with watch._lock:                     # its watch's events no longer reach log a's mark
        del watch._dirs[watch._watched[str(tmp_path / "a")]]
    with CommitLog.open(tmp_path / "a", flush="none") as writer:
        writer.mark_dead(range(writer.segments()[0].end_offset))         # its first segment all dead
    time.sleep(RACY)
    assert job() == (set(), 0), "missed: its last look stands on its remembered key"
    monkeypatch.setattr(changes, "COMPACTION_FULL_CHECK", RACY)          # the safety net's period, passed now
    assert job() == ({"a"}, 2)
    assert scheduler.compactions.last["outputs"] == 1, "the dead segment compacted"


def test_without_the_roll_watch_every_log_is_keyed_every_job(tmp_path):
    make_log(tmp_path / "a", 2)
    scheduler = RetentionScheduler(_config(tmp_path, ["a"]), watch_rolls=False)
    try:
        job = _Job(scheduler)
        for _ in range(3):
            time.sleep(RACY)
            job()
        assert job() == (set(), 1), "not looked at, keyed by stats"
    finally:
        scheduler.stop()
