"""retention.deletion.clockguard with injected clocks: a forward step between looks or at start
holds a trusted now until accepted or until the clock returns; each transition is an audit line,
and a hold the audit trail has not seen lifted resumes at the next start."""

from __future__ import annotations

import os
import threading

from retention.audit import CLOCK_ACCEPTED, CLOCK_RETURNED, CLOCK_SET_BACK, CLOCK_STEPPED, AuditTrail, read_events
from retention.deletion.clockguard import AT_START, BETWEEN_LOOKS, ClockGuard, newest_time

DAY = 86400.0
YEAR = 365 * DAY
T0 = 1_800_000_000.0


class Clocks:
    """A wall clock and a boot clock a test moves: `tick` moves both, `step` the wall clock only."""

    def __init__(self) -> None:
        self.wall, self.boot = T0, 500.0

    def tick(self, seconds: float) -> None:
        self.wall += seconds
        self.boot += seconds

    def step(self, seconds: float) -> None:
        self.wall += seconds


def guard(tmp_path, clocks: Clocks, threshold: float = DAY) -> ClockGuard:
    return ClockGuard(threshold, audit=AuditTrail(str(tmp_path / "audit.jsonl")), clock=lambda: clocks.wall,
                      elapsed=lambda: clocks.boot)


def events(tmp_path) -> list[str]:
    return [e["event"] for e in read_events(str(tmp_path / "audit.jsonl"))]


def test_a_year_step_between_looks_holds_the_time_before_it_plus_the_time_elapsed(tmp_path):
    clocks = Clocks()
    g = guard(tmp_path, clocks)
    g.start(T0 - 60)
    assert g.trusted_now() is None
    clocks.tick(10)
    clocks.step(YEAR)
    assert g.trusted_now() == T0 + 10
    clocks.tick(30)
    assert g.trusted_now() == T0 + 40                    # the trusted clock keeps running
    state = g.state()
    assert state["detected"] == BETWEEN_LOOKS and state["step_seconds"] == YEAR
    assert "retention clock accept" in g.describe()
    assert events(tmp_path) == [CLOCK_STEPPED]


def test_a_step_within_the_threshold_and_a_backward_step_hold_nothing(tmp_path):
    clocks = Clocks()
    g = guard(tmp_path, clocks)
    g.start(T0)
    clocks.step(DAY - 1)
    assert g.trusted_now() is None
    clocks.step(-YEAR)
    assert g.trusted_now() is None
    assert events(tmp_path) == [CLOCK_SET_BACK]          # said (once), held nothing
    clocks.tick(60)
    assert g.trusted_now() is None and events(tmp_path) == [CLOCK_SET_BACK]


def test_accepting_lifts_the_hold_and_the_new_time_is_trusted(tmp_path):
    clocks = Clocks()
    g = guard(tmp_path, clocks)
    g.start(T0)
    clocks.step(YEAR)
    g.look()
    accepted = g.accept()
    assert accepted["held"] and accepted["step_seconds"] == YEAR
    clocks.tick(60)
    assert g.trusted_now() is None and g.state() is None
    assert g.accept()["held"] is False                   # nothing held: nothing written
    assert events(tmp_path) == [CLOCK_STEPPED, CLOCK_ACCEPTED]


def test_the_clock_returning_lifts_the_hold(tmp_path):
    clocks = Clocks()
    g = guard(tmp_path, clocks)
    g.start(T0)
    clocks.step(YEAR)
    g.look()
    clocks.tick(5)
    clocks.step(-YEAR)
    assert g.trusted_now() is None
    assert events(tmp_path) == [CLOCK_STEPPED, CLOCK_RETURNED]


def test_a_look_that_read_the_stepped_clock_before_another_look_saw_it_return_holds_nothing_again(tmp_path):
    # Two threads look while the clock comes back: the first reads the stepped clock, then (before
    # it judges) the clock returns and the second thread looks. Judged in the other order, the older
    # reading was a new step against the newer one: a second clock-stepped and clock-returned (seen
    # in CI with a real sidecar under libfaketime).
    clocks = Clocks()
    g = guard(tmp_path, clocks)
    g.start(T0)
    clocks.step(YEAR)
    g.look()
    first_read, second_done = threading.Event(), threading.Event()

    def wall_of_the_first_look() -> float:
        if threading.current_thread().name != "first":
            return clocks.wall
        reading = clocks.wall
        clocks.step(-YEAR)                              # the clock returns right after this reading
        first_read.set()
        second_done.wait(0.5)                           # the second look runs now if it can
        return reading

    g._clock = wall_of_the_first_look
    first = threading.Thread(target=g.look, name="first")
    first.start()
    first_read.wait(5)
    second = threading.Thread(target=lambda: (g.look(), second_done.set()), name="second")
    second.start()
    first.join(5)
    second.join(5)
    assert g.trusted_now() is None
    assert events(tmp_path) == [CLOCK_STEPPED, CLOCK_RETURNED]


def test_at_start_a_clock_ahead_of_the_newest_time_on_disk_holds_that_time(tmp_path):
    log = tmp_path / "log"
    log.mkdir()
    (log / "00000000000000000000.log").write_bytes(b"x")
    os.utime(log / "00000000000000000000.log", (T0, T0))
    AuditTrail(str(tmp_path / "audit.jsonl")).append({"event": "deleted", "time": "2027-01-14T08:00:00.000+00:00"})
    os.utime(tmp_path / "audit.jsonl", (T0 - DAY, T0 - DAY))
    newest = newest_time([str(log), str(tmp_path / "missing")], str(tmp_path / "audit.jsonl"))
    assert newest == T0                     # the segment's mtime (2027-01-15 08:00); the audit line is a day older
    clocks = Clocks()
    clocks.step(YEAR)
    g = guard(tmp_path, clocks)
    g.start(newest)
    assert g.trusted_now() == T0 and g.state()["detected"] == AT_START


def test_a_hold_not_lifted_resumes_at_the_next_start_and_an_accepted_one_does_not(tmp_path):
    clocks = Clocks()
    g = guard(tmp_path, clocks)
    g.start(T0)
    clocks.step(YEAR)
    g.look()
    clocks.tick(100)
    restarted = guard(tmp_path, clocks)
    restarted.start(clocks.wall)            # writers went on under the new time: the disk looks current
    assert restarted.trusted_now() == T0 + 100
    restarted.accept()
    again = guard(tmp_path, clocks)
    again.start(clocks.wall)
    assert again.trusted_now() is None


def test_a_job_a_year_behind_lists_a_few_run_times_not_every_missed_second():
    # APScheduler listed all 31.5 million missed runs of a 1 s job one by one (about 70 s and 1.5 GB
    # here) before coalescing them: the scheduler's thread, disk checks included, stalled on them.
    from datetime import datetime, timedelta, timezone

    from apscheduler.job import Job
    from retention.scheduling.jobs import StepSafeInterval

    start = datetime(2026, 11, 26, tzinfo=timezone.utc)
    trigger = StepSafeInterval(seconds=1, timezone=timezone.utc, start_date=start)
    now = start + timedelta(days=365, seconds=0.5)
    job = Job.__new__(Job)
    job.trigger, job.next_run_time = trigger, start + timedelta(seconds=10)
    runs = job._get_run_times(now)
    assert len(runs) <= 2 and runs[0] == start + timedelta(seconds=10)
    assert trigger.get_next_fire_time(runs[-1], now) > now
    assert trigger.get_next_fire_time(start, start + timedelta(seconds=1.5)) == start + timedelta(seconds=1)


def test_the_judged_time_is_the_trusted_now_while_held_and_the_wall_clock_otherwise(tmp_path):
    clocks = Clocks()
    g = guard(tmp_path, clocks)
    g.start(T0)
    assert g.judged() == T0
    clocks.step(YEAR)
    assert g.judged() == T0
    g.accept()
    assert g.judged() == T0 + YEAR


def test_a_year_ahead_a_compaction_keeps_the_tombstone_a_group_has_not_read(tmp_path):
    # At +1 year etl (consumer_ttl 7d) looked stale and the tombstone's retention long past: the
    # scheduler's compaction dropped a tombstone etl had not read. It judges at the trusted now.
    import time

    from commitlog import CommitLog
    from compaction_helpers import compaction_config
    from retention import RetentionScheduler
    from test_compactor import _keyed_log, _kill_fillers

    log_dir = tmp_path / "a"
    tomb = _keyed_log(log_dir)
    _, config = compaction_config(tmp_path, log_dir, keys="true", max_live_ratio=1.0, tombstone_retention="1h")
    with CommitLog.open(log_dir, readonly=True) as log:
        log.commit("etl", 0)                    # never read the tombstone
    now = [time.time()]
    with RetentionScheduler(config, clock=lambda: now[0]) as scheduler:
        scheduler.compact()                     # the tombstone first seen now
        _kill_fillers(log_dir, tomb)
        now[0] += YEAR
        kept = scheduler.compact(dry_run=True)
        assert sum(o.dropped["tombstone"] for o in kept.logs[0].outputs) == 0
        scheduler.accept_clock()
        gone = scheduler.compact(dry_run=True)
        assert sum(o.dropped["tombstone"] for o in gone.logs[0].outputs) == 1
