"""Passes that look one by one only at the logs due (retention/deletion/due.py): an idle pass looks
at none, a change gets its log alone looked at and planned, and over random changes, appends, clock
moves, manual triggers and end checks, passes that look only at the logs due decide exactly as
passes that look at every log, run side by side over two copies of the same logs. Real logs, real
SQLite, real inotify through each scheduler's roll watch; the plans' monotonic clock is a fake the
test moves (so that end reads fall due at the same moments in both copies)."""

from __future__ import annotations

import os
import random
import time
from datetime import timedelta

import pytest

from commitlog import CommitLog
from retention.deletion import changes, unchanged

from retention_helpers import make_log, set_age
from test_unchanged import RACY, _now, _planned
from test_unchanged_inotify import _pass, _settle, sidecar  # noqa: F401 (the fixture)

NAMES = [f"l{i:02d}" for i in range(10)]


def test_an_idle_pass_looks_at_no_log_and_a_commit_gets_that_log_alone_looked_at(tmp_path, sidecar, monkeypatch):
    monkeypatch.setattr(unchanged, "END_CHECK", 1e9)        # no end read falls due here
    for name in NAMES:
        make_log(tmp_path / name, 2)
    with CommitLog.open(tmp_path / "l03", flush="none") as writer:
        writer.commit("etl", 1)
        scheduler, cleaner = sidecar(tmp_path, NAMES)
        _settle(scheduler, cleaner)
        looked = cleaner.memory.looked
        assert _pass(scheduler, cleaner) == (set(), 0)
        assert cleaner.memory.looked == looked, "an idle pass looks at no log one by one"
        writer.commit("etl", 2)
        time.sleep(RACY)
        looked = cleaner.memory.looked
        assert _pass(scheduler, cleaner) == ({"l03"}, 1)
        assert cleaner.memory.looked == looked + 1, "the log an event marked, alone"
        assert len(cleaner.last_result.logs) == len(NAMES), "every other log carried, in the pass's result"


def test_a_delete_hour_opening_gets_every_log_looked_at(tmp_path, sidecar, monkeypatch):
    """The triggers of a policy on a disk are tested once a pass for all of its logs: when they
    move (a delete hour opens), every log is looked at, as the look at each would find."""
    monkeypatch.setattr(unchanged, "END_CHECK", 1e9)
    for name in NAMES:
        make_log(tmp_path / name, 2)
    t0 = (_now() + timedelta(hours=1)).replace(minute=10)        # later than any pass yet
    scheduler, cleaner = sidecar(tmp_path, NAMES, delete_at_hours=[(t0.hour + 1) % 24], timezone="UTC", reserve="6h")
    _settle(scheduler, cleaner)
    looked = cleaner.memory.looked
    assert _planned(cleaner.run_pass(t0 + timedelta(minutes=20))) == set()
    assert cleaner.memory.looked == looked, "the same triggers: no log looked at"
    assert _planned(cleaner.run_pass(t0 + timedelta(minutes=55))) == set(NAMES), "its delete hour opened"


class _Mono:
    """The plans' clock (`unchanged.time`): a monotonic clock the test moves; time_ns is real."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def monotonic(self) -> float:
        return self.now

    @staticmethod
    def time_ns() -> int:
        return time.time_ns()


def _by_name(path: str, period: float, share: float = 0.5) -> float:
    """`changes.stagger` of the log's name, not its path: the same phase in both copies."""
    return period * share * (sum(os.path.basename(path).encode()) % 97) / 97


def _twin_logs(tmp_path, sidecar, monkeypatch):
    """Two copies of NAMES, each under its own scheduler: (the cleaner that looks only at the logs
    due, the cleaner that looks at every log, their writers: name -> (writer a, writer b), the clock)."""
    clock = _Mono()
    monkeypatch.setattr(unchanged, "time", clock)
    monkeypatch.setattr(unchanged, "stagger", _by_name)
    monkeypatch.setattr(changes, "stagger", _by_name)
    cleaners, writers, made = [], {name: [] for name in NAMES}, time.time()
    for copy in ("a", "b"):
        for i, name in enumerate(NAMES):
            bases = make_log(tmp_path / copy / name, 2)
            # Its sealed segments as old as to turn older than reserve (1h) 10 + 3i minutes on.
            set_age(tmp_path / copy / name, bases[:-1], (50 - 3 * i) * 60, now=made)
            writers[name].append(CommitLog.open(tmp_path / copy / name, flush="none"))
        scheduler, cleaner = sidecar(tmp_path / copy, NAMES, consumer_ttl="2h")
        _settle(scheduler, cleaner)
        cleaners.append(cleaner)
    monkeypatch.setattr(cleaners[1].memory, "_due_names", lambda *args, **kwargs: None)   # every log, each pass
    return cleaners[0], cleaners[1], writers, clock


def _change(rng: random.Random, writers: dict, cleaners: tuple) -> None:
    """The same random changes to both copies: commits, appends through the mapping (no event),
    dead marks, a manual trigger."""
    for name in rng.sample(NAMES, rng.randint(0, 3)):
        kind = rng.choice(("commit", "append", "append", "dead"))
        for writer in writers[name]:
            if kind == "commit":
                writer.commit("etl", writer.end_offset)
            elif kind == "append":
                writer.append(b"one more record")
            else:
                writer.mark_dead([writer.end_offset - 1])
    if rng.random() < 0.05:
        passes = rng.randint(1, 3)       # not the default 20: its closing seen too, and passes after it
        for cleaner in cleaners:
            cleaner.trigger_manual(passes=passes)


@pytest.mark.parametrize("seed", [7])
def test_passes_that_look_only_at_the_logs_due_decide_as_passes_that_look_at_every_log(
        tmp_path, sidecar, monkeypatch, seed):
    _compare_twins(tmp_path, sidecar, monkeypatch, seed, steps=14)


@pytest.mark.fuzz
@pytest.mark.parametrize("seed", range(1, 6))
def test_many_random_runs_of_passes_that_look_only_at_the_logs_due(tmp_path, sidecar, monkeypatch, seed):
    _compare_twins(tmp_path, sidecar, monkeypatch, seed, steps=30)


def _compare_twins(tmp_path, sidecar, monkeypatch, seed: int, *, steps: int) -> None:
    rng = random.Random(seed)
    due, every, writers, clock = _twin_logs(tmp_path, sidecar, monkeypatch)
    at, looked_fewer = _now() + timedelta(minutes=8), 0
    try:
        for step in range(steps):
            _change(rng, writers, (due, every))
            time.sleep(RACY)                               # both copies' changes past the racy window
            clock.now += rng.choice((0.0, 5.0, 25.0, 45.0, 70.0))      # END_CHECK is 60 s
            at += timedelta(minutes=rng.choice((0, 1, 2, 4))) if step % 5 != 4 else timedelta(minutes=-9)
            looked, tails = due.memory.looked, (due.memory.tails, every.memory.tails)
            seen = [cleaner.run_pass(at) for cleaner in (due, every)]
            where = f"seed {seed}, step {step}"
            assert _planned(seen[0]) == _planned(seen[1]), where
            assert sorted(r.name for r in seen[0].logs) == sorted(r.name for r in seen[1].logs) == NAMES, where
            assert due.memory.tails - tails[0] == every.memory.tails - tails[1], f"{where}: the same end reads"
            looked_fewer += due.memory.looked - looked < len(NAMES)
    finally:
        for pair in writers.values():
            for writer in pair:
                writer.close()
    assert looked_fewer >= steps // 3, f"the passes looked at every log: {looked_fewer} of {steps} did not"
