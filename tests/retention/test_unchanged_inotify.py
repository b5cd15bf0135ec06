"""Change-driven passes with inotify's dirty marks (retention/deletion/changes.py, the roll watch's
events): a log nothing touched is carried without its key taken again; each change that must get a
log planned again still does; a lost event queue, a log with no working watch and the full check's
safety net take keys again. Real logs, real SQLite, real inotify through a scheduler's roll watch
(as `retention serve` runs it); the racy-mtime rule is waited out."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from commitlog import CommitLog
from retention import RetentionScheduler
from retention.deletion import changes, unchanged
from retention.scheduling import rollwatch

from retention_helpers import make_log
from test_unchanged import RACY, _config, _log_view


@pytest.fixture
def sidecar():
    """A scheduler over the logs under a directory (not started: passes are run by the test), its
    roll watch on and synced; (scheduler, its filesystem's cleaner)."""
    made = []

    def make(tmp: Path, names, **policy) -> tuple[RetentionScheduler, object]:
        scheduler = RetentionScheduler(_config(tmp, names, **policy), watch_rolls=True)
        made.append(scheduler)
        scheduler.disk_check.watch()
        return scheduler, next(iter(scheduler._state.filesystems.values())).cleaner
    yield make
    for scheduler in made:
        scheduler.stop()


def _pass(scheduler: RetentionScheduler, cleaner) -> tuple[set[str], int]:
    """An interval pass: (the logs it planned, the keys it took by stats)."""
    keyed = cleaner.memory.keyed
    scheduler.passes.interval("default")
    return {r.name for r in cleaner.last_result.logs if not r.unchanged}, cleaner.memory.keyed - keyed


def _settle(scheduler, cleaner) -> None:
    """Passes until none plans a log or takes a key (a first pass claims and opens each log, and
    the next sees its files settle and its SQLite companions go: events, each a dirty mark)."""
    for _ in range(6):
        time.sleep(RACY)
        planned, keyed = _pass(scheduler, cleaner)
        if not planned and not keyed:
            return
    raise AssertionError("logs are planned or keyed every pass")


def test_a_log_nothing_touched_is_not_keyed_and_each_change_plans_it_again(tmp_path, sidecar):
    changed = ["commit", "marks", "roll", "removal", "rename", "chmod", "utime", "swapped"]
    names = ["untouched", *changed]
    for n in names:
        make_log(tmp_path / n, 2)
        (tmp_path / n / "notes.txt").write_text("a user's file in the log directory")
    writers = {n: CommitLog.open(tmp_path / n, flush="none") for n in ("commit", "marks", "roll", "utime")}
    try:
        writers["commit"].commit("etl", 1)               # its -wal exists from here on
        writers["marks"].mark_dead([0])                   # its marks file exists from here on
        writers["utime"].mark_dead([0])
        scheduler, cleaner = sidecar(tmp_path, names)
        _settle(scheduler, cleaner)
        time.sleep(RACY)
        assert _pass(scheduler, cleaner) == (set(), 0), "nothing changed: every log carried, no key taken"

        writers["commit"].commit("etl", 2)                # a consumer commit: state.db's -wal, a QUIET name
        writers["marks"].mark_dead([1])
        roll = writers["roll"]
        segments = len(roll.segments())
        while len(roll.segments()) == segments:          # a segment rolled
            roll.append(b"r" * 100)
        (tmp_path / "removal" / "notes.txt").unlink()
        (tmp_path / "rename" / "notes.txt").rename(tmp_path / "rename" / "notes.old")
        os.chmod(tmp_path / "chmod", 0o750)
        marks = tmp_path / "utime" / "marks"
        before = os.stat(marks)
        writers["utime"].mark_dead([1])                  # written in place, its mtime put back
        os.utime(marks, ns=(before.st_atime_ns, before.st_mtime_ns))
        swapped = tmp_path / "swapped"
        shutil.copytree(swapped, tmp_path / "swapped.new", copy_function=shutil.copy2)
        swapped.rename(tmp_path / "swapped.old")         # the directory swapped for a copy
        (tmp_path / "swapped.new").rename(swapped)
        time.sleep(RACY)          # each change older than the racy window: the key, not its age, tells
        planned, keyed = _pass(scheduler, cleaner)
        assert planned == set(changed)
        assert keyed == len(changed), "the untouched log's key is not taken"
        scheduler.disk_check._rolls.retry()              # as the disk check does: the swapped path watched again
        _settle(scheduler, cleaner)
        assert cleaner.memory.changes.is_watched(str(swapped))
    finally:
        for w in writers.values():
            w.close()


def test_a_lost_event_queue_takes_every_key_again(tmp_path, sidecar):
    names = ["a", "b", "noisy"]
    for n in names:
        make_log(tmp_path / n, 2)
    for f in ("one", "two"):
        (tmp_path / "noisy" / f).write_text(f)
    scheduler, cleaner = sidecar(tmp_path, names)
    _settle(scheduler, cleaner)
    watch = scheduler.disk_check._rolls
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    with watch._lock:                     # the watch's thread cannot take its events off the queue
        for i in range(limit + 4096):     # attribute events alternating between two files: none merged
            f = tmp_path / "noisy" / ("one", "two")[i % 2]
            os.utime(f, ns=(1_000_000_000, 1_000_000_000))
    time.sleep(RACY)
    assert _pass(scheduler, cleaner) == (set(), len(names)), "every key taken again, nothing changed"
    assert _pass(scheduler, cleaner) == (set(), 0)


def test_a_log_without_a_working_watch_is_keyed_every_pass(tmp_path, sidecar, monkeypatch):
    make_log(tmp_path / "a", 2)
    scheduler, cleaner = sidecar(tmp_path, ["a", "late"])   # "late" does not exist: not watched
    make_log(tmp_path / "late", 2)
    _settle_but(scheduler, cleaner, {"late"})
    for _ in range(2):
        time.sleep(RACY)
        assert _pass(scheduler, cleaner) == (set(), 1), "the unwatched log keyed by stats, carried"
    scheduler.disk_check._rolls.retry()                     # the disk check watches it now
    _settle(scheduler, cleaner)

    monkeypatch.setattr(rollwatch, "TRUSTED_FILESYSTEMS", frozenset())   # e.g. NFS: events only of this host
    scheduler.disk_check._rolls.close()
    scheduler.disk_check._rolls = None
    scheduler.disk_check.watch()                            # a new watch, on filesystems it does not trust
    for _ in range(2):
        time.sleep(RACY)
        assert _pass(scheduler, cleaner) == (set(), 2)


def _settle_but(scheduler, cleaner, keyed_always: set[str]) -> None:
    for _ in range(6):
        time.sleep(RACY)
        planned, keyed = _pass(scheduler, cleaner)
        if not planned and keyed == len(keyed_always):
            return
    raise AssertionError("logs are planned every pass")


def test_the_full_check_catches_a_change_no_event_reported(tmp_path, sidecar, monkeypatch):
    for n in ("a", "b"):
        make_log(tmp_path / n, 2)
    with CommitLog.open(tmp_path / "a", flush="none") as writer:
        writer.commit("etl", 1)
        scheduler, cleaner = sidecar(tmp_path, ["a", "b"])
        _settle(scheduler, cleaner)
        watch = scheduler.disk_check._rolls
        with watch._lock:                 # its watch's events no longer reach log a's mark
            wd = watch._watched[str(tmp_path / "a")]
            del watch._dirs[wd]
        writer.commit("etl", 2)
        time.sleep(RACY)
        assert _pass(scheduler, cleaner) == (set(), 0), "missed: carried on its remembered key"
        monkeypatch.setattr(changes, "FULL_CHECK", RACY)   # the safety net's period, passed now
        assert _pass(scheduler, cleaner) == ({"a"}, 2)


def test_an_append_no_decision_depends_on_is_shown_within_the_end_check(tmp_path, sidecar, monkeypatch):
    # The end check far off: its spread (a plan's end dated up to END_CHECK early) puts none of
    # this log's end reads in the passes before the bound is passed below.
    monkeypatch.setattr(unchanged, "END_CHECK", 1e9)
    make_log(tmp_path / "a", 2)
    with CommitLog.open(tmp_path / "a", flush="none") as writer:
        scheduler, cleaner = sidecar(tmp_path, ["a"])
        _settle(scheduler, cleaner)
        shown = _log_view(scheduler.status(), "a")["end_offset"]
        tails = cleaner.memory.tails
        end = writer.append(b"one more record") + 1              # through the mapping: no event
        assert end > shown
        time.sleep(RACY)
        assert _pass(scheduler, cleaner) == (set(), 0), "carried: no decision depends on the append"
        assert cleaner.memory.tails == tails, "a clean log's end is not read"
        assert _log_view(scheduler.status(), "a")["end_offset"] == shown, "shown as its last plan saw it"
        monkeypatch.setattr(unchanged, "END_CHECK", RACY)       # the bound on what is shown, passed now
        assert _pass(scheduler, cleaner) == ({"a"}, 0), "its end read, its remembered key compared"
        assert cleaner.memory.tails == tails + 1
        assert _log_view(scheduler.status(), "a")["end_offset"] == end
        time.sleep(RACY)
        assert _pass(scheduler, cleaner)[0] == set(), "planned at the end it read: carried again"


def test_an_append_to_an_empty_segment_under_roll_after_is_seen_at_the_next_pass(tmp_path, sidecar):
    for n in ("written", "empty"):
        make_log(tmp_path / n, 2)
    writers = {n: CommitLog.open(tmp_path / n, flush="none") for n in ("written", "empty")}
    try:
        with writers["empty"]._lock:      # a roll whose record is not written yet (a writer killed there)
            writers["empty"]._writer.roll(64)
        assert writers["empty"].segments()[-1].record_count == 0
        scheduler, cleaner = sidecar(tmp_path, ["written", "empty"], roll_after="1h")
        _settle(scheduler, cleaner)
        for writer in writers.values():
            writer.append(b"one more record")                    # through the mapping: no event
        time.sleep(RACY)
        assert _pass(scheduler, cleaner) == ({"empty"}, 0), "its first record starts the roll's clock"
        time.sleep(RACY)
        assert _pass(scheduler, cleaner)[0] == set(), "its first record's time read: carried again"
    finally:
        for writer in writers.values():
            writer.close()


SPREAD_LOGS = [f"l{i:02d}" for i in range(30)]


def _spread_logs(tmp_path, sidecar, monkeypatch):
    """30 logs with END_CHECK at 6 s, settled: (scheduler, cleaner)."""
    monkeypatch.setattr(unchanged, "END_CHECK", 6.0)
    for name in SPREAD_LOGS:
        make_log(tmp_path / name, 1)
    scheduler, cleaner = sidecar(tmp_path, SPREAD_LOGS)
    _settle(scheduler, cleaner)
    return scheduler, cleaner


def _assert_ends_spread(scheduler, cleaner, *, none_keyed: bool) -> None:
    """Passes every 0.5 s for two END_CHECKs, none planning a log (nor, `none_keyed`, taking a
    key): every end read within END_CHECK, and no pass reading most of them. A pass that came
    more than a quarter of END_CHECK after the one before (the suite's load stalled the test)
    has a quarter of the ends or more rightly due, so the bound is judged on the other passes,
    which must be most of them."""
    reads = []                                         # (seconds since the pass before, ends read)
    started = last = time.monotonic()
    while time.monotonic() - started < 2 * unchanged.END_CHECK:
        tails, now = cleaner.memory.tails, time.monotonic()
        planned, keyed = _pass(scheduler, cleaner)
        assert planned == set()
        if none_keyed:
            assert keyed == 0
        reads.append((now - last, cleaner.memory.tails - tails))
        last = now
        time.sleep(0.5)
    read_by_pass = [read for _, read in reads]
    assert sum(read_by_pass) >= len(SPREAD_LOGS), f"every end read within END_CHECK: {reads}"
    timely = [read for gap, read in reads if gap <= unchanged.END_CHECK / 4]
    assert len(timely) >= 2 * len(reads) // 3, f"the test's passes were stalled: {reads}"
    assert max(timely) <= len(SPREAD_LOGS) // 2, f"one pass read most ends: {reads}"


def test_the_ends_of_logs_planned_in_one_pass_are_read_again_in_different_passes(tmp_path, sidecar, monkeypatch):
    """At start every log is planned in one pass: its end read dated up to END_CHECK early by its
    path, the end checks of 10,000 logs fall over the passes of an END_CHECK, not all in one. Each
    end is still read within END_CHECK of the last read."""
    scheduler, cleaner = _spread_logs(tmp_path, sidecar, monkeypatch)
    _assert_ends_spread(scheduler, cleaner, none_keyed=True)


def test_a_reload_keeps_the_spread_of_the_end_checks(tmp_path, sidecar, monkeypatch):
    """A reload (a SIGHUP, or a discovery root's log come or gone) hands each unchanged log's plan
    to a new memory: the passes after it claim and key each log again (its end read), and the
    spread of the end checks stands after them: no later pass reads most of the 30 ends at once."""
    scheduler, cleaner = _spread_logs(tmp_path, sidecar, monkeypatch)
    scheduler.reload(scheduler._state.config)
    scheduler.disk_check.watch()                    # as a started scheduler's reload does
    cleaner = next(iter(scheduler._state.filesystems.values())).cleaner
    _settle(scheduler, cleaner)                     # its claims taken again, each log keyed: each end read
    _assert_ends_spread(scheduler, cleaner, none_keyed=False)


def test_a_pass_after_a_stall_reads_every_end_and_the_spread_stands(tmp_path, sidecar, monkeypatch):
    """A pass that comes two END_CHECKs late (a stalled disk, a stopped process) reads every end,
    each overdue. Each is dated in its log's place of the spread, not at that pass: no pass after
    it reads most of the 30 ends at once (each did, every END_CHECK, when dated at the pass)."""
    scheduler, cleaner = _spread_logs(tmp_path, sidecar, monkeypatch)
    time.sleep(2 * unchanged.END_CHECK)
    tails = cleaner.memory.tails
    assert _pass(scheduler, cleaner) == (set(), 0)
    assert cleaner.memory.tails - tails == len(SPREAD_LOGS), "every end overdue, each read"
    _assert_ends_spread(scheduler, cleaner, none_keyed=True)


def test_a_link_planted_at_a_clean_log_s_last_segment_fails_that_log_s_pass_only(tmp_path, sidecar, monkeypatch):
    """The end read of a log no event marked dirty (an event missed, or come after the pass read
    the marks) finds a symbolic link at its last segment: that log is planned and its pass says
    so; the pass over the other logs of its filesystem goes on."""
    for n in ("a", "b"):
        make_log(tmp_path / n, 2)
    scheduler, cleaner = sidecar(tmp_path, ["a", "b"])
    _settle(scheduler, cleaner)
    watch = scheduler.disk_check._rolls
    with watch._lock:                     # its watch's events no longer reach log a's mark
        del watch._dirs[watch._watched[str(tmp_path / "a")]]
    last = cleaner.logs["a"].last_seen.path
    os.rename(last, last + ".real")
    os.symlink(os.path.basename(last) + ".real", last)
    monkeypatch.setattr(unchanged, "END_CHECK", 0.0)          # every clean log's end read now
    time.sleep(RACY)
    assert _pass(scheduler, cleaner) == ({"a"}, 0)
    errors = {r.name: r.error for r in cleaner.last_result.logs}
    assert "symbolic link" in errors["a"] and errors["b"] is None, errors
