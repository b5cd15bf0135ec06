"""The clock record beside the audit trail, with injected wall clock, boot clock and boot id: a
restart on the same boot knows what time it should be however idle the logs sat (no false
`clock-stepped` after a quiet weekend), finds a step made while it was down even when writers went
on under the new time, and after a reboot falls back to the newest time on disk. A record that
cannot be read or written is a WARNING and the old comparison, never a crash."""

from __future__ import annotations

import os

import pytest
from loguru import logger

from policies import ClockMark
from retention.audit import AuditTrail
from retention.deletion.clockguard import AT_START, MARK_EVERY, ClockGuard
from retention.deletion.clockrecord import ClockRecord, record_path
from test_clockguard import DAY, T0, YEAR, Clocks, events


class BootClocks(Clocks):
    """Clocks with a boot id: `reboot` starts a new boot (boot clock from `up`)."""

    def __init__(self) -> None:
        super().__init__()
        self.boot_id = "boot-1"

    def reboot(self, up: float = 30.0) -> None:
        self.boot, self.boot_id = up, self.boot_id + "+"


def started(tmp_path, clocks: BootClocks, newest: float | None, *, record: bool = True) -> ClockGuard:
    g = ClockGuard(DAY, audit=AuditTrail(str(tmp_path / "audit.jsonl")), record=record, clock=lambda: clocks.wall,
                   elapsed=lambda: clocks.boot, boot=lambda: clocks.boot_id)
    g.start(newest)
    return g


def the_record(tmp_path) -> ClockRecord:
    return ClockRecord(record_path(str(tmp_path / "audit.jsonl")))


@pytest.fixture
def warnings():
    lines: list[str] = []
    sink = logger.add(lines.append, level="WARNING", format="{message}")
    yield lines
    logger.remove(sink)


def test_a_restart_on_the_same_boot_after_three_idle_days_is_no_step(tmp_path):
    clocks = BootClocks()
    started(tmp_path, clocks, T0 - 60)
    clocks.tick(3 * DAY)                     # nothing written, committed or deleted meanwhile
    restarted = started(tmp_path, clocks, T0 - 60)
    assert restarted.trusted_now() is None and restarted.state() is None
    assert events(tmp_path) == []


def test_a_step_while_down_is_found_on_the_same_boot_though_writers_went_on_under_it(tmp_path):
    clocks = BootClocks()
    started(tmp_path, clocks, T0)
    clocks.tick(60)
    clocks.step(YEAR)
    restarted = started(tmp_path, clocks, clocks.wall)     # the disk looks current by the new clock
    assert restarted.trusted_now() == T0 + 60
    assert restarted.state()["detected"] == AT_START and restarted.state()["step_seconds"] == YEAR


def test_after_a_reboot_the_newest_of_the_record_and_the_disk_is_compared_as_before(tmp_path):
    clocks = BootClocks()
    started(tmp_path, clocks, None)          # logs not written yet
    clocks.tick(3 * DAY)
    clocks.reboot()
    held = started(tmp_path, clocks, None)
    assert held.trusted_now() == T0          # the record's time is a lower bound (down 3 days: a step)
    held.accept()
    clocks.tick(60)
    clocks.reboot()
    assert started(tmp_path, clocks, T0 - 10 * DAY).trusted_now() is None     # rebooted soon after: no step
    clocks.tick(60)
    clocks.reboot()
    assert started(tmp_path, clocks, clocks.wall + 2 * DAY).trusted_now() is None   # disk ahead: as before


def test_a_clock_set_back_while_down_is_said_and_holds_nothing(tmp_path, warnings):
    clocks = BootClocks()
    started(tmp_path, clocks, T0)
    clocks.tick(60)
    clocks.step(-YEAR)
    assert started(tmp_path, clocks, T0).trusted_now() is None
    assert any("it was set back" in line for line in warnings)


def test_the_record_is_rewritten_at_most_once_a_minute_and_holds_the_trusted_time(tmp_path):
    clocks = BootClocks()
    g = started(tmp_path, clocks, T0)
    assert the_record(tmp_path).read().wall == T0
    clocks.tick(MARK_EVERY / 2)
    g.look()
    assert the_record(tmp_path).read().wall == T0
    clocks.tick(MARK_EVERY / 2)
    g.look()
    assert the_record(tmp_path).read().wall == T0 + MARK_EVERY
    clocks.tick(1)
    clocks.step(YEAR)
    g.look()                                 # a hold is written at once, as the trusted time
    assert the_record(tmp_path).read().wall == T0 + MARK_EVERY + 1
    g.accept()                               # and so is an accepted clock
    assert the_record(tmp_path).read().wall == clocks.wall
    clocks.tick(5)
    assert started(tmp_path, clocks, T0).trusted_now() is None


def test_a_hold_whose_audit_line_was_lost_is_found_again_by_the_record(tmp_path):
    clocks = BootClocks()
    g = started(tmp_path, clocks, T0)
    clocks.tick(10)
    clocks.step(YEAR)
    g.look()
    os.unlink(tmp_path / "audit.jsonl")
    clocks.tick(10)
    assert started(tmp_path, clocks, clocks.wall).trusted_now() == T0 + 20


def test_a_hold_resumed_on_the_same_boot_counts_a_second_step_made_while_down(tmp_path):
    # The audit trail alone resumed at the held time plus the *wall* time since its line, so a
    # second year's step while the sidecar was down passed as elapsed time: a year judged expired.
    clocks = BootClocks()
    g = started(tmp_path, clocks, T0)
    clocks.tick(10)
    clocks.step(YEAR)
    g.look()
    clocks.tick(10)
    clocks.step(YEAR)
    restarted = started(tmp_path, clocks, clocks.wall)
    assert restarted.trusted_now() == T0 + 20
    assert restarted.state()["step_seconds"] == 2 * YEAR


@pytest.mark.parametrize("trail", ["rotated", "lines after the step"])
def test_a_held_step_survives_a_reboot_whatever_the_audit_trail_still_shows(tmp_path, trail):
    # The hold came back only through the audit trail's tail: rotated, or with more lines after the
    # `clock-stepped` line than the tail reads, the reboot compared with the newest time on disk,
    # which writers had stamped with the stepped clock, and judged a year ahead.
    clocks = BootClocks()
    g = started(tmp_path, clocks, T0)
    clocks.tick(60)
    clocks.step(YEAR)
    g.look()
    clocks.tick(3600)
    g.look()
    audit = str(tmp_path / "audit.jsonl")
    if trail == "rotated":
        os.rename(audit, audit + ".1")
    else:
        with open(audit, "a") as f:
            f.write('{"event": "deleted", "time": "2028-01-15T10:00:00.000+00:00"}\n' * 70000)   # > 4 MiB
    clocks.reboot()
    resumed = started(tmp_path, clocks, clocks.wall)      # the disk looks current by the stepped clock
    assert resumed.trusted_now() == T0 + 60 + 3600        # the recorded trusted time: still held
    clocks.tick(60)
    clocks.reboot()                                       # and again: only accept or the clock returning lift it
    again = started(tmp_path, clocks, clocks.wall)
    assert again.state()["step_seconds"] == YEAR + 60 and again.accept()["held"]
    clocks.tick(60)
    clocks.reboot()
    assert started(tmp_path, clocks, clocks.wall).trusted_now() is None


def test_a_read_only_look_writes_no_record(tmp_path):
    clocks = BootClocks()
    started(tmp_path, clocks, T0, record=False)
    assert not os.path.lexists(the_record(tmp_path).path)


@pytest.mark.parametrize("damage", [b"", b"{\"wall\": 1e999}", b"not json", b"x" * 5000,
                                    b"{\"wall\": 1.0, \"uptime\": -1, \"boot_id\": \"boot-1\"}"])
def test_a_damaged_record_falls_back_to_the_disk_with_a_warning_and_is_rewritten(tmp_path, warnings, damage):
    clocks = BootClocks()
    started(tmp_path, clocks, T0)
    clocks.tick(3 * DAY)
    with open(the_record(tmp_path).path, "wb") as f:
        f.write(damage)
    assert started(tmp_path, clocks, T0).trusted_now() == T0          # the old comparison: held
    assert any("is damaged" in line for line in warnings)
    assert the_record(tmp_path).read() == ClockMark(T0, clocks.boot, clocks.boot_id, 3 * DAY)   # held: the trusted time


def test_a_record_missing_beside_an_existing_audit_trail_is_a_warning(tmp_path, warnings):
    clocks = BootClocks()
    started(tmp_path, clocks, None)
    assert warnings == []                    # a first start: nothing to miss
    AuditTrail(str(tmp_path / "audit.jsonl")).append({"event": "deleted", "time": "2027-01-15T08:00:00.000+00:00"})
    os.unlink(the_record(tmp_path).path)
    started(tmp_path, clocks, None)
    assert any("no clock record" in line for line in warnings)


def test_an_unwritable_record_is_one_warning_and_the_guard_goes_on(tmp_path, warnings):
    clocks = BootClocks()
    os.mkdir(the_record(tmp_path).path)      # a directory where the record goes: cannot be replaced
    g = started(tmp_path, clocks, T0)
    for _ in range(3):
        clocks.tick(MARK_EVERY)
        g.look()
    clocks.step(YEAR)
    assert g.trusted_now() is not None
    written = [line for line in warnings if "cannot be written" in line]
    assert len(written) == 1, warnings
    assert sorted(os.listdir(tmp_path)) == ["audit.jsonl", "audit.jsonl.clock"]    # no temporary left


def test_a_link_planted_at_the_record_is_never_followed(tmp_path, warnings):
    clocks = BootClocks()
    target = tmp_path / "precious"
    target.write_text("keep")
    os.symlink(target, the_record(tmp_path).path)
    started(tmp_path, clocks, T0)
    assert any("cannot be read" in line for line in warnings)
    assert target.read_text() == "keep"
    assert the_record(tmp_path).read().wall == T0        # the link itself was replaced by the record
    tmp = the_record(tmp_path).path + f".{os.getpid()}.tmp"
    os.symlink(target, tmp)                  # a link at our temporary's name: refused, left, warned
    clocks.tick(MARK_EVERY)
    started(tmp_path, clocks, T0)
    assert target.read_text() == "keep" and os.path.islink(tmp)
    assert any("cannot be written" in line for line in warnings)
