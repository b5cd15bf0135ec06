"""RetentionScheduler with a real APScheduler: the job set per policy, rescheduling on reload, the
first pass, pressure passes, errors that never stop it, one pass per filesystem at a time."""

from __future__ import annotations

import threading
import time
from datetime import timezone
from pathlib import Path

import pytest
from apscheduler.triggers.interval import IntervalTrigger

from commitlog import CommitLog, DiskUsage
from retention import Cleaner, RetentionScheduler, read_audit
from retention.scheduling import pressure_watch as pressure_module

from retention_helpers import make_log, segment_bases, set_age, write_config

TWO_POLICIES = """
service:
  audit: audit.jsonl
logs:
  orders:
    path: logs/orders
    policy: fast
  payments:
    path: logs/payments
    policy: fast
  clicks:
    path: logs/clicks
    policy: slow
policies:
  fast:
    interval: 5s
    hung:
      retry_every: 30s
  slow:
    interval: 7s
    disk_check_interval: 500ms
  unused:
    interval: 1s
"""


def _jobs(s: RetentionScheduler) -> dict:
    return {j.id: j for j in s._scheduler.get_jobs()}


def _seconds(job) -> float:
    assert isinstance(job.trigger, IntervalTrigger)
    return job.trigger.interval.total_seconds()


class Recorder:
    """An on_pass callback that remembers (kind, result) and lets a test wait for one."""

    def __init__(self) -> None:
        self.passes: list[tuple[str, object]] = []
        self._cond = threading.Condition()

    def __call__(self, kind, result) -> None:
        with self._cond:
            self.passes.append((kind, result))
            self._cond.notify_all()

    def wait(self, predicate, timeout: float = 10.0):
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = [p for p in self.passes if predicate(*p)]
                if found:
                    return found
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no matching pass in {timeout}s; passes: {[k for k, _ in self.passes]}")
                self._cond.wait(left)

    def kinds(self) -> list[str]:
        with self._cond:
            return [k for k, _ in self.passes]


def test_one_cleanup_and_one_hung_job_per_policy_in_use_and_one_disk_check(tmp_path):
    _, config = write_config(tmp_path, TWO_POLICIES)
    s = RetentionScheduler(config)
    s.start()
    try:
        jobs = _jobs(s)
        assert set(jobs) == {"cleanup:fast", "cleanup:slow", "hung:fast", "hung:slow", "disk-check",
                             "compact:fast", "compact:slow"}   # compaction is on by default, every 5m
        assert _seconds(jobs["compact:fast"]) == 300
        assert _seconds(jobs["cleanup:fast"]) == 5 and _seconds(jobs["cleanup:slow"]) == 7
        assert _seconds(jobs["hung:fast"]) == 30 and _seconds(jobs["hung:slow"]) == 120
        assert _seconds(jobs["disk-check"]) == 0.5          # the smallest disk_check_interval in use
        for job in jobs.values():
            assert job.max_instances == 1 and job.coalesce is True
            assert job.misfire_grace_time >= _seconds(job)  # at least one interval
            assert job.trigger.timezone == timezone.utc
        assert s._scheduler.timezone == timezone.utc
        assert jobs["disk-check"].executor == "disk"         # never queued behind a long pass
    finally:
        s.stop()
    assert not s.running


def test_reload_reschedules_adds_and_removes_jobs_and_swaps_the_cleaners(tmp_path):
    _, config = write_config(tmp_path, TWO_POLICIES)
    s = RetentionScheduler(config)
    s.start()
    try:
        old_cleaners = [fs.cleaner for fs in s._state.filesystems.values()]
        untouched_next = _jobs(s)["hung:fast"].next_run_time
        _, new = write_config(tmp_path, """
            service:
              audit: audit.jsonl
            logs:
              orders:
                path: logs/orders
                policy: fast
              clicks:
                path: logs/clicks
                policy: fresh
            policies:
              fast:
                interval: 3s
                hung:
                  retry_every: 30s
              fresh:
                interval: 11s
                delete_at_hours: [1, 2]
            """, name="new.yaml")
        s.reload(new)
        jobs = _jobs(s)
        assert set(jobs) == {"cleanup:fast", "cleanup:fresh", "hung:fast", "hung:fresh", "disk-check",
                             "compact:fast", "compact:fresh"}
        assert _seconds(jobs["cleanup:fast"]) == 3          # rescheduled
        assert _seconds(jobs["cleanup:fresh"]) == 11        # added
        assert jobs["hung:fast"].next_run_time == untouched_next   # unchanged jobs keep their phase
        assert _seconds(jobs["disk-check"]) == 1            # back to the default
        status = s.status()
        assert status["policies"]["fast"]["interval_seconds"] == 3
        assert status["policies"]["fresh"]["delete_at_hours"] == [1, 2]
        assert [log["name"] for log in status["logs"]] == ["orders", "clicks"]
        assert all(c.stopping for c in old_cleaners)        # a running pass would end at its next file
        assert all(fs.cleaner not in old_cleaners for fs in s._state.filesystems.values())
        exposition = s.metrics.exposition().decode()
        assert 'retention_policy_interval_seconds{policy="fast"} 3.0' in exposition
        assert 'policy="slow"' not in exposition
        assert 'retention_config_reloads_total{result="ok"} 1.0' in exposition
    finally:
        s.stop()


SIMPLE = """
service:
  audit: {audit}
logs:
  staging:
    path: {log}
    segment_size: 4KiB
policies:
  default:
    interval: {interval}
    delete_at_hours: {hours}
    reserve: 1h
    files_per_pass: {files}
    pause_between_files: {pause}
"""


def _simple(tmp_path: Path, *, interval="1h", hours="[]", files=10, pause="0ms"):
    return write_config(tmp_path, SIMPLE.format(audit=tmp_path / "audit.jsonl", log=tmp_path / "staging",
                                                interval=interval, hours=hours, files=files, pause=pause))[1]


def test_first_pass_runs_right_after_start_and_finishes_leftover_removals(tmp_path):
    log_dir = tmp_path / "staging"
    bases = make_log(log_dir, 6)
    with CommitLog.open(log_dir, readonly=True) as log:
        # A removal a crash cut short: the state moved past the head, the file got renamed only.
        log._state.advance_start_offset(bases[1])
    (log_dir / f"{bases[0]:020d}.log").rename(log_dir / f"{bases[0]:020d}.log.deleted")
    config = _simple(tmp_path)
    recorder = Recorder()
    s = RetentionScheduler(config, on_pass=recorder)
    started = time.monotonic()
    s.start()
    try:
        recorder.wait(lambda kind, r: kind == "interval", timeout=5)
        assert time.monotonic() - started < 3                # not after the one-hour interval
        assert not list(log_dir.glob("*.deleted"))
        assert segment_bases(log_dir) == bases[1:]
        assert s.ready
        assert s.health() == (True, [])
    finally:
        s.stop()


def _fake_usage(ratio_box):
    def usage(path):
        total = 1_000_000
        used = int(total * ratio_box[0])
        return DiskUsage(0, total, used, total - used)
    return usage


def test_crossing_force_ratio_starts_passes_at_once_and_clean_ratio_one_pass(tmp_path, monkeypatch):
    make_log(tmp_path / "staging", 3)
    ratio = [0.10]
    monkeypatch.setattr(pressure_module, "disk_usage", _fake_usage(ratio))
    recorder = Recorder()
    s = RetentionScheduler(_simple(tmp_path), on_pass=recorder)
    s.start()
    try:
        recorder.wait(lambda kind, r: kind == "interval")
        time.sleep(1.2)
        assert "pressure" not in recorder.kinds()            # below clean_ratio: nothing extra
        ratio[0] = 0.80                                      # crossing clean_ratio: one pass
        recorder.wait(lambda kind, r: kind == "pressure", timeout=2.5)
        time.sleep(2.5)
        assert recorder.kinds().count("pressure") == 1       # staying above clean: no more
        ratio[0] = 0.95                                      # above force_ratio: passes keep coming
        before = recorder.kinds().count("pressure")
        time.sleep(2.6)
        assert recorder.kinds().count("pressure") >= before + 2
        status = s.status()
        assert status["filesystems"][0]["pressure"] == "refuse-writes" and status["filesystems"][0]["forcing"]
        assert "retention_disk_pressure_level" in s.metrics.exposition().decode()
    finally:
        s.stop()


def test_a_pass_that_raises_is_counted_and_never_stops_the_scheduler(tmp_path, monkeypatch):
    make_log(tmp_path / "staging", 2)
    real = Cleaner.run_pass
    calls = []

    def flaky(self, *args, **kwargs):
        calls.append(time.monotonic())
        if len(calls) <= 2:
            raise RuntimeError("disk on fire")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Cleaner, "run_pass", flaky)
    recorder = Recorder()
    s = RetentionScheduler(_simple(tmp_path, interval="300ms"), on_pass=recorder)
    s.start()
    try:
        recorder.wait(lambda kind, r: kind == "interval", timeout=5)   # the third pass ran
        assert s.running
        text = s.metrics.exposition().decode()
        assert 'retention_passes_total{kind="interval",outcome="error"} 2.0' in text
        assert 'retention_passes_total{kind="interval",outcome="ok"}' in text
    finally:
        s.stop()


def test_health_fails_when_no_pass_completes_for_three_intervals(tmp_path, monkeypatch):
    make_log(tmp_path / "staging", 2)

    def broken(self, *args, **kwargs):
        raise RuntimeError("always")

    monkeypatch.setattr(Cleaner, "run_pass", broken)
    s = RetentionScheduler(_simple(tmp_path, interval="200ms"))
    s.start()
    try:
        time.sleep(0.9)
        healthy, problems = s.health()
        assert not healthy and any("no completed pass" in p for p in problems), problems
        assert s.status()["logs"][0]["last_pass"]["outcome"] == "error"
        assert s.alive()                                     # the scheduler itself is fine
    finally:
        s.stop()


def test_at_most_one_pass_per_filesystem_and_overrunning_jobs_are_skipped_and_counted(tmp_path, monkeypatch):
    _, config = write_config(tmp_path, """
        service:
          audit: audit.jsonl
        logs:
          a:
            path: a
            policy: p1
          b:
            path: b
            policy: p2
        policies:
          p1:
            interval: 100ms
          p2:
            interval: 100ms
        """)
    real = Cleaner.run_pass
    running = []
    peak = []
    lock = threading.Lock()

    def slow(self, *args, **kwargs):
        with lock:
            running.append(1)
            peak.append(len(running))
        try:
            time.sleep(0.25)
            return real(self, *args, **kwargs)
        finally:
            with lock:
                running.pop()

    monkeypatch.setattr(Cleaner, "run_pass", slow)
    s = RetentionScheduler(config)
    s.start()
    try:
        time.sleep(1.5)
    finally:
        s.stop()
    assert len(peak) >= 3 and max(peak) == 1                 # both logs share tmp_path's filesystem
    text = s.metrics.exposition().decode()
    assert 'retention_scheduler_job_events_total{event="skipped",job="cleanup:p1"}' in text


def test_stop_cuts_a_pass_short_between_files(tmp_path):
    log_dir = tmp_path / "staging"
    bases = make_log(log_dir, 6)
    set_age(log_dir, bases[:-1], 7200)
    recorder = Recorder()
    s = RetentionScheduler(_simple(tmp_path, hours=list(range(24)), pause="30s"), on_pass=recorder)
    s.start()
    deadline = time.monotonic() + 10
    while len(segment_bases(log_dir)) == len(bases) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(segment_bases(log_dir)) == len(bases) - 1     # the first deletion, then a 30 s pause
    started = time.monotonic()
    s.stop()
    assert time.monotonic() - started < 1.5
    (kind, result), = recorder.passes
    assert result.interrupted and result.deleted == 1
    assert [e["base_offset"] for e in read_audit(str(tmp_path / "audit.jsonl"))] == [bases[0]]
    assert s.status()["logs"][0]["last_pass"]["outcome"] == "interrupted"


def test_clean_and_plan_on_demand(tmp_path):
    log_dir = tmp_path / "staging"
    bases = make_log(log_dir, 5)
    set_age(log_dir, bases[:-1], 7200)
    s = RetentionScheduler(_simple(tmp_path, files=2))
    s.start()
    try:
        plain = s.plan().to_json_dict()
        assert [f["action"] for f in plain["logs"][0]["files"]] == ["keep"] * len(bases)
        preview = s.plan(manual=True).to_json_dict()
        planned = [f["segment"] for f in preview["logs"][0]["files"] if f["action"] == "delete"]
        assert len(planned) == 2
        done = s.clean().to_json_dict()
        assert [f["segment"] for f in done["logs"][0]["files"] if f["action"] == "deleted"] == planned
        assert s.status()["logs"][0]["manual_passes_left"] == 19   # manual_passes 20, one used
    finally:
        s.stop()


def test_embedding_as_a_context_manager_needs_no_http_or_signals(tmp_path):
    make_log(tmp_path / "staging", 1)
    recorder = Recorder()
    with RetentionScheduler(_simple(tmp_path), on_pass=recorder) as s:
        recorder.wait(lambda kind, r: kind == "interval")
        assert s.running
    assert not s.running
    with pytest.raises(RuntimeError):
        s.start()


def test_a_one_off_job_added_again_as_the_last_one_returns_still_runs():
    """A pressure job discards its filesystem from `running` in its last lines; APScheduler counts
    the instance ended only after that, when the thread has returned. A request in between (a disk
    check) added the job again and, with max_instances 1, it was skipped and dropped: the
    filesystem stayed in `running` and got no pressure pass again."""
    from retention.scheduling.jobs import add_once, new_scheduler
    from retention.scheduling.metrics import RetentionMetrics

    scheduler = new_scheduler(4, RetentionMetrics())
    scheduler.start()
    ran = []
    second = threading.Event()

    def job(n):
        ran.append(n)
        if n == 1:
            add_once(scheduler, job, (2,), "pressure:/x")   # the request, before this one has ended
            time.sleep(0.3)
        else:
            second.set()
    try:
        add_once(scheduler, job, (1,), "pressure:/x")
        assert second.wait(5), f"the job added again never ran: {ran}"
        deadline = time.monotonic() + 5
        while scheduler.get_jobs() and time.monotonic() < deadline:   # removed once run: then shut down
            time.sleep(0.01)
    finally:
        scheduler.shutdown(wait=True)
