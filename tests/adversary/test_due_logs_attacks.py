"""Passes that look one by one only at the logs due (retention/deletion/due.py) attacked: what the
look at every log does not rely on, and the passes that look only at the logs due do. The triggers
of a policy on a disk read at a log whose directory is gone since; a pass that raised after it took
the moments due off its heaps, before its plans were remembered; an `END_CHECK` changed between two
passes. Each time, the passes must plan the logs and read the ends a look at every log plans and
reads. Real logs, real SQLite, real inotify through a scheduler's roll watch; two copies side by side
(`test_due_logs`), the plans' monotonic clock a fake the test moves; a fault injected once where a
pass raises (a removal failing as no handler expects)."""

from __future__ import annotations

import errno
import shutil
import time
from datetime import timedelta

from retention.deletion import unchanged

from retention_helpers import make_log
from test_due_logs import _twin_logs
from test_unchanged import _now, _planned
from test_unchanged_inotify import _settle, sidecar  # noqa: F401 (sidecar: a fixture)


def _close(writers: dict) -> None:
    for pair in writers.values():
        for writer in pair:
            writer.close()


def test_a_log_directory_removed_fails_no_pass_and_a_delete_hour_opening_still_plans_every_log(
        tmp_path, sidecar, monkeypatch):
    """The triggers are read at the first log of the group (`a`): gone, its disk's usage cannot be
    read at its path. On f196323 that pass raised (FileNotFoundError), and the pass after it checked
    no group's triggers at all (the raise left none read): a delete hour opening planned no log."""
    monkeypatch.setattr(unchanged, "END_CHECK", 1e9)         # no end read looks at a log here
    names = ["a", "b", "c"]
    for name in names:
        make_log(tmp_path / name, 2)
    t0 = (_now() + timedelta(hours=1)).replace(minute=10)        # later than any pass yet
    scheduler, cleaner = sidecar(tmp_path, names, delete_at_hours=[(t0.hour + 1) % 24], timezone="UTC", reserve="6h")
    _settle(scheduler, cleaner)
    assert _planned(cleaner.run_pass(t0)) == set()
    shutil.rmtree(tmp_path / "a")
    time.sleep(0.2)                                  # the watch's thread reads the event
    raised, first = None, None
    try:
        first = _planned(cleaner.run_pass(t0 + timedelta(minutes=20)))
    except OSError as exc:             # as the scheduler's pass: recorded as failed, the next one runs
        raised = exc
    later = _planned(cleaner.run_pass(t0 + timedelta(minutes=55)))
    assert (raised, first, later) == (None, {"a"}, set(names)), \
        "the removed log planned, the pass not failed; at the delete hour, every log planned"


def _raise_once(cleaner) -> None:
    """The cleaner's next pass raises where it executes its plans (after the split, before the
    plans are remembered), as a removal failing as no handler expects would."""
    def execute(results, wait):
        del cleaner._execute                         # the class's again
        raise OSError(errno.EIO, "a removal failed as no handler expects (injected)")
    cleaner._execute = execute


def test_after_a_pass_that_raised_before_its_plans_were_remembered_the_passes_plan_as_a_look_at_every_log(
        tmp_path, sidecar, monkeypatch):
    """`l00`'s segment turns older than reserve 10 minutes on: its plan's deadline. The pass at it
    took the deadline off the heap, planned `l00` and raised before remembering a plan: on f196323,
    the passes after it carried `l00`'s old plan (its deadline never on the heap again), where the
    look at every log plans it."""
    due, every, writers, _ = _twin_logs(tmp_path, sidecar, monkeypatch)
    at = _now() + timedelta(minutes=8)
    try:
        seen = [cleaner.run_pass(at) for cleaner in (due, every)]
        assert _planned(seen[0]) == _planned(seen[1]) == set()
        at += timedelta(minutes=3)                       # l00's deadline
        for cleaner in (due, every):
            _raise_once(cleaner)
            try:
                cleaner.run_pass(at)
            except OSError:
                pass
            else:
                raise AssertionError("the injected fault raised nothing")
        for step in range(2):
            seen = [cleaner.run_pass(at + timedelta(seconds=step)) for cleaner in (due, every)]
            assert step or "l00" in _planned(seen[1]), "its deadline came: the look at every log plans it"
            assert _planned(seen[0]) == _planned(seen[1]), f"pass {step} after the one that raised"
    finally:
        _close(writers)


def test_after_end_check_changed_the_passes_read_the_ends_a_look_at_every_log_reads(tmp_path, sidecar, monkeypatch):
    """Settled at END_CHECK 60 s, each log's end read 6 to 12 s ago; END_CHECK made 30 s: that pass
    looks at every log and reads no end (none is 30 s old). 35 s on, with a record appended to each
    log through its mapping (no event), the look at every log reads every end and plans every log.
    On f196323 the passes read none: each end's moment on the heap was END_CHECK 60's, no more due."""
    due, every, writers, clock = _twin_logs(tmp_path, sidecar, monkeypatch)
    at = _now() + timedelta(minutes=1)
    try:
        monkeypatch.setattr(unchanged, "END_CHECK", 30.0)
        seen = [cleaner.run_pass(at) for cleaner in (due, every)]
        assert _planned(seen[0]) == _planned(seen[1]) == set()
        for pair in writers.values():
            for writer in pair:
                writer.append(b"one more record")
        time.sleep(0.2)
        clock.now += 35.0
        tails = (due.memory.tails, every.memory.tails)
        seen = [cleaner.run_pass(at) for cleaner in (due, every)]
        assert every.memory.tails - tails[1] == len(writers), "the look at every log reads every end"
        assert due.memory.tails - tails[0] == every.memory.tails - tails[1], "the same end reads"
        assert _planned(seen[0]) == _planned(seen[1])
    finally:
        _close(writers)
