"""A sidecar restarted on the same boot knows what time it should be from the clock record beside
its audit trail (`<audit>.clock`): real sidecars, stopped and started again.

Before the record, the start-up look had only the newest time on disk: a sidecar restarted after
more time than `service.clock_step_threshold` with no write, commit or deletion raised
`clock-stepped` and held deletion until an operator accepted; and a clock stepped while the sidecar
was down went unseen when writers had gone on under the new time (the disk looked current).

Idle time is simulated honestly: nobody can fake /proc/uptime, so the idle restart rewinds what the
first sidecar left (its record, the logs' and the audit trail's mtimes) by D seconds of this boot's
real uptime, D = min(3 days, uptime - 2 minutes): the record then says what the host's boot clock
really read D seconds ago. The threshold is D/2 (a 3-day idle with a 1-day threshold on a host up
that long). The step is libfaketime +3 days on the second sidecar only.
"""

from __future__ import annotations

import os

import pytest

from clock_helpers import (audit_events, clock_problem, commit, faketime_env, more_passes, problems, segment_end,
                           step_clock)
from policies import ClockMark
from retention.deletion.clockguard import boot_clock
from retention.deletion.clockrecord import ClockRecord, record_path
from retention_helpers import config_text, make_log, segment_bases, write_config
from sidecar_helpers import Sidecar

DAY = 86400


def _setup(tmp_path, *, threshold: str = "1d", reserve: str = "1h"):
    """6 fresh 4 KiB segments, `etl` having read the first two; a pass every second at any hour."""
    log_dir = tmp_path / "staging"
    bases = make_log(log_dir, 6)
    commit(str(log_dir), "etl", segment_end(str(log_dir), bases[1]))
    path, _ = write_config(tmp_path, config_text(tmp_path, sidecar=True, service={"clock_step_threshold": threshold},
                                                 policy={"interval": "1s", "delete_at_hours": "00-23",
                                                         "consumer_ttl": "7d", "reserve": reserve}))
    return log_dir, bases, path, str(tmp_path / "audit.jsonl")


def _run_once(path, tmp_path) -> None:
    """A sidecar that starts, passes and stops (SIGTERM), leaving its clock record."""
    with Sidecar(path, cwd=tmp_path) as sidecar:
        sidecar.wait_ready(timeout=60)
        more_passes(sidecar, 1)
        assert clock_problem(sidecar) is None


def _set_mtimes(log_dir, audit: str, at: float) -> None:
    """Every file of the log directory and the audit trail last written at `at`."""
    for name in os.listdir(log_dir):
        os.utime(os.path.join(log_dir, name), (at, at), follow_symlinks=False)
    if os.path.exists(audit):
        os.utime(audit, (at, at))


def test_a_sidecar_restarted_after_idle_days_on_the_same_boot_needs_no_operator(tmp_path):
    idle = min(3 * DAY, int(boot_clock()) - 120)
    if idle < 120:
        pytest.skip(f"the host has been up {boot_clock():.0f}s: too short to rewind a record by 2 minutes of "
                    "its boot clock (tests/retention/test_clockrecord.py covers it with injected clocks)")
    log_dir, bases, path, audit = _setup(tmp_path, threshold=f"{idle // 2}s", reserve=f"{idle // 2}s")
    _run_once(path, tmp_path)
    assert audit_events(audit, "clock-stepped") == [] and audit_events(audit, "deleted") == []
    marks = ClockRecord(record_path(audit))
    mark = marks.read()
    assert mark is not None, "the first sidecar left no clock record"
    marks.write(ClockMark(mark.wall - idle, mark.uptime - idle, mark.boot_id))     # last seen `idle` s ago
    _set_mtimes(log_dir, audit, mark.wall - idle)                                 # nothing written since
    with Sidecar(path, cwd=tmp_path) as sidecar:
        sidecar.wait_ready(timeout=60)
        # Idle longer than reserve: what etl has read is due now, without anyone accepting anything.
        sidecar.wait_for(lambda: segment_bases(log_dir) == bases[2:], timeout=60, what="the read segments deleted")
        more_passes(sidecar)
        assert clock_problem(sidecar) is None, sidecar.log()
    assert audit_events(audit, "clock-stepped") == []
    assert "Traceback" not in sidecar.log(), sidecar.log()


def test_a_clock_stepped_while_the_sidecar_was_down_is_found_though_the_disk_looks_current(tmp_path):
    log_dir, bases, path, audit = _setup(tmp_path)
    _run_once(path, tmp_path)
    ahead = ClockRecord(record_path(audit)).read().wall + 3 * DAY
    _set_mtimes(log_dir, audit, ahead)            # writers went on under the stepped clock
    with Sidecar(path, cwd=tmp_path, env=faketime_env(tmp_path / "faketime", "+3d", fixed=True)) as sidecar:
        problem = sidecar.wait_for(lambda: clock_problem(sidecar), timeout=60, what="clock-stepped at start")
        assert "at-start" in problem
        more_passes(sidecar)
        assert segment_bases(log_dir) == bases
    stepped = audit_events(audit, "clock-stepped")
    assert len(stepped) == 1 and stepped[0]["detected"] == "at-start"
    assert 3 * DAY - 600 < stepped[0]["step_seconds"] < 3 * DAY + 600
    assert "Traceback" not in sidecar.log(), sidecar.log()


def test_a_second_step_while_a_held_sidecar_was_down_is_held_too(tmp_path):
    # The audit trail alone resumed a hold at its trusted time plus the wall clock's time since its
    # line: a second year's step while the sidecar was down counted as a year elapsed, so every
    # segment looked a year old and `etl` stale, and the next pass deleted what etl had not read.
    log_dir, bases, path, audit = _setup(tmp_path)
    stamp = tmp_path / "faketime"
    with Sidecar(path, cwd=tmp_path, env=faketime_env(stamp, "+365d", fixed=True)) as sidecar:
        sidecar.wait_for(lambda: clock_problem(sidecar), timeout=60, what="clock-stepped at start")
    with Sidecar(path, cwd=tmp_path, env=faketime_env(stamp, "+730d", fixed=True)) as sidecar:
        sidecar.wait_for(lambda: clock_problem(sidecar), timeout=60, what="the hold resumed")
        more_passes(sidecar)
        assert segment_bases(log_dir) == bases, sidecar.log()
        _, status = sidecar.get_json("/status")
        assert status["clock"]["step_seconds"] > 729 * DAY
    assert audit_events(audit, "deleted") == []
    assert "Traceback" not in sidecar.log(), sidecar.log()


def test_a_clock_set_back_from_a_year_ahead_keeps_the_passes_and_disk_checks_running(tmp_path):
    # APScheduler slept until its jobs' next run times, a year ahead once the clock came back: every
    # pass and disk check stopped (passes-late, disk-check-stalled) until then.
    _, _, path, _ = _setup(tmp_path)
    stamp = tmp_path / "faketime"
    with Sidecar(path, cwd=tmp_path, env=faketime_env(stamp)) as sidecar:
        sidecar.wait_ready(timeout=60)
        step_clock(stamp, "+365d")
        sidecar.wait_for(lambda: clock_problem(sidecar), timeout=60, what="clock-stepped")
        more_passes(sidecar)
        step_clock(stamp, "+0")
        sidecar.wait_for(lambda: clock_problem(sidecar) is None, timeout=60, what="clock-returned")
        more_passes(sidecar, 3, timeout=60)
        assert not [p for p in problems(sidecar) if p.startswith(("passes-late", "disk-check-stalled"))]
    assert "Traceback" not in sidecar.log(), sidecar.log()
