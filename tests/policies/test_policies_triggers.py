"""Triggers with an injected clock: the hour window, disk thresholds and manual passes."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest
from plan_builders import policy

from policies import (
    DISK_CLEAN,
    DISK_FORCE,
    MANUAL,
    NO_MANUAL_TRIGGER,
    REFUSE_WRITES,
    TIME_WINDOW,
    TRIGGERS,
    ManualTrigger,
    active_triggers,
    disk_forces,
    disk_triggers,
    in_delete_window,
    next_delete_window,
)

UTC = timezone.utc
EPSILON = 1e-9


def utc(*fields: int) -> datetime:
    return datetime(*fields, tzinfo=UTC)


def open_minutes(window_policy, start: datetime, hours: int) -> list[datetime]:
    """Every UTC minute in ``hours`` hours from ``start`` at which the window is open."""
    minutes = (start + timedelta(minutes=offset) for offset in range(hours * 60))
    return [minute for minute in minutes if in_delete_window(window_policy, minute)]


def test_trigger_names_are_the_contract():
    assert TRIGGERS == ("time-window", "disk-clean", "disk-force", "refuse-writes", "manual", "size-cap", "budget")


@pytest.mark.parametrize(
    ("moment", "open_"),
    [
        (utc(2026, 1, 10, 22, 59, 59), False),
        (utc(2026, 1, 10, 23, 0, 0), True),
        (utc(2026, 1, 10, 23, 59, 59), True),
        (utc(2026, 1, 11, 0, 0, 0), True),
        (utc(2026, 1, 11, 0, 59, 59), True),
        (utc(2026, 1, 11, 1, 0, 0), False),
    ],
)
def test_window_spanning_midnight_opens_before_and_after_it(moment, open_):
    assert in_delete_window(policy(delete_at_hours=[23, 0]), moment) is open_


def test_window_is_read_on_the_policys_clock():
    tokyo = policy(delete_at_hours="00", timezone="Asia/Tokyo")
    assert in_delete_window(tokyo, utc(2026, 1, 10, 15, 30))  # 00:30 on the 11th in Tokyo
    assert not in_delete_window(tokyo, utc(2026, 1, 10, 14, 59))  # 23:59 in Tokyo
    assert in_delete_window(tokyo, datetime(2026, 1, 11, 0, 30, tzinfo=timezone(timedelta(hours=9))))


def test_window_at_a_missing_hour_does_not_open_on_the_day_clocks_go_forward():
    # Europe/Berlin, 2026-03-29: 02:00 CET jumps to 03:00 CEST at 01:00 UTC, so 02:xx never happens.
    start = utc(2026, 3, 28, 18)
    assert open_minutes(policy(delete_at_hours=[2], timezone="Europe/Berlin"), start, 12) == []
    three = open_minutes(policy(delete_at_hours=[3], timezone="Europe/Berlin"), start, 12)
    assert (three[0], three[-1], len(three)) == (utc(2026, 3, 29, 1, 0), utc(2026, 3, 29, 1, 59), 60)
    one = open_minutes(policy(delete_at_hours=[1], timezone="Europe/Berlin"), start, 12)
    assert (one[0], len(one)) == (utc(2026, 3, 29, 0, 0), 60)


def test_window_at_a_repeated_hour_opens_for_both_occurrences_when_clocks_go_back():
    # Europe/Berlin, 2026-10-25: 03:00 CEST falls back to 02:00 CET at 01:00 UTC, so 02:xx happens twice.
    start = utc(2026, 10, 24, 18)
    two = open_minutes(policy(delete_at_hours=[2], timezone="Europe/Berlin"), start, 12)
    assert (two[0], two[-1], len(two)) == (utc(2026, 10, 25, 0, 0), utc(2026, 10, 25, 1, 59), 120)
    three = open_minutes(policy(delete_at_hours=[3], timezone="Europe/Berlin"), start, 12)
    assert (three[0], len(three)) == (utc(2026, 10, 25, 2, 0), 60)


def test_window_on_an_ordinary_berlin_day_follows_the_utc_offset():
    winter = policy(delete_at_hours=[4], timezone="Europe/Berlin")
    assert in_delete_window(winter, utc(2026, 1, 10, 3, 0))  # CET = UTC+1
    assert in_delete_window(winter, utc(2026, 7, 10, 2, 0))  # CEST = UTC+2
    assert not in_delete_window(winter, utc(2026, 7, 10, 3, 0))


@pytest.fixture
def local_time_new_york(monkeypatch):
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_window_without_a_time_zone_uses_the_machines_local_time(local_time_new_york):
    local = policy(delete_at_hours=[4], timezone=None)
    assert in_delete_window(local, utc(2026, 1, 10, 9, 30))  # 04:30 EST
    assert not in_delete_window(local, utc(2026, 1, 10, 4, 30))  # 23:30 EST
    assert in_delete_window(local, utc(2026, 7, 10, 8, 30))  # 04:30 EDT


def test_window_never_opens_without_hours():
    never = policy(delete_at_hours=[])
    assert open_minutes(never, utc(2026, 1, 10), 24) == []


def test_naive_time_is_rejected():
    with pytest.raises(ValueError, match="aware datetime"):
        in_delete_window(policy(), datetime(2026, 1, 10, 4, 0))


@pytest.mark.parametrize(
    ("ratio", "expected"),
    [
        (0.0, ()),
        (0.75 - EPSILON, ()),
        (0.75, ()),
        (0.75 + EPSILON, (DISK_CLEAN,)),
        (0.85 - EPSILON, (DISK_CLEAN,)),
        (0.85, (DISK_CLEAN,)),
        (0.85 + EPSILON, (DISK_CLEAN, DISK_FORCE)),
        (0.90 - EPSILON, (DISK_CLEAN, DISK_FORCE)),
        (0.90, (DISK_CLEAN, DISK_FORCE)),
        (0.90 + EPSILON, (DISK_CLEAN, DISK_FORCE, REFUSE_WRITES)),
        (1.0, (DISK_CLEAN, DISK_FORCE, REFUSE_WRITES)),
    ],
)
def test_each_disk_trigger_fires_just_above_its_threshold(ratio, expected):
    assert disk_triggers(policy().disk, ratio) == expected
    assert disk_forces(policy().disk, ratio) is (DISK_FORCE in expected)


@pytest.mark.parametrize(
    ("ratio", "expected"),
    [(0.85 + EPSILON, (DISK_CLEAN,)), (0.90 + EPSILON, (DISK_CLEAN, REFUSE_WRITES))],
)
def test_without_disk_force_nothing_forces_even_when_writes_are_refused(ratio, expected):
    no_force = policy(disk={"force": False}).disk
    assert disk_triggers(no_force, ratio) == expected
    assert disk_forces(no_force, ratio) is False


def test_active_triggers_combine_in_contract_order():
    window = utc(2026, 1, 10, 4, 15)
    # Every trigger of the policy; size-cap and budget are a log's, decided by the planner from sizes.
    assert active_triggers(policy(), 0.95, window, ManualTrigger.open(3)) == TRIGGERS[:-2]
    assert active_triggers(policy(), 0.1, utc(2026, 1, 10, 12), NO_MANUAL_TRIGGER) == ()
    assert active_triggers(policy(), 0.1, utc(2026, 1, 10, 12), ManualTrigger.open(1)) == (MANUAL,)
    assert active_triggers(policy(), 0.1, window) == (TIME_WINDOW,)


def test_manual_passes_count_down_to_closed():
    trigger = ManualTrigger.open(3, force=True)
    seen = []
    for _ in range(4):
        seen.append((trigger.remaining, trigger.active, trigger.forcing))
        trigger = trigger.after_pass()
    assert seen == [(3, True, True), (2, True, True), (1, True, True), (0, False, False)]
    assert trigger == ManualTrigger(0, False) == NO_MANUAL_TRIGGER
    assert active_triggers(policy(), 0.1, utc(2026, 1, 10, 12), trigger) == ()


def test_manual_trigger_is_an_immutable_value():
    trigger = ManualTrigger.open(2)
    assert trigger.after_pass() == ManualTrigger(1, False)
    assert trigger.remaining == 2
    with pytest.raises(AttributeError):
        trigger.remaining = 5  # type: ignore[misc]


def test_a_new_manual_request_replaces_the_open_one():
    assert ManualTrigger.open(20, force=True).after_pass() != ManualTrigger.open(20)
    assert ManualTrigger.open(20) == ManualTrigger(20, False)


@pytest.mark.parametrize("passes", [0, -1])
def test_manual_trigger_needs_a_positive_number_of_passes(passes):
    with pytest.raises(ValueError):
        ManualTrigger.open(passes)


def test_manual_trigger_rejects_a_negative_count():
    with pytest.raises(ValueError):
        ManualTrigger(remaining=-1)


def test_next_delete_window_is_now_while_open_else_the_next_delete_hours_start():
    berlin = policy(delete_at_hours=[4], timezone="Europe/Berlin")
    assert next_delete_window(berlin, utc(2026, 1, 10, 3, 20)) == utc(2026, 1, 10, 3, 20)   # 04:20 in Berlin
    assert next_delete_window(berlin, utc(2026, 1, 10, 3, 0, 1)) == utc(2026, 1, 10, 3, 0, 1)
    assert next_delete_window(berlin, utc(2026, 1, 10, 4, 0)) == utc(2026, 1, 11, 3, 0)     # tomorrow 04:00
    # Clocks going forward skip 02:xx on 2026-03-29: the next 02:00 in Berlin is a day later.
    skipped = policy(delete_at_hours=[2], timezone="Europe/Berlin")
    assert next_delete_window(skipped, utc(2026, 3, 28, 18)) == utc(2026, 3, 30, 0, 0)
    # A zone half an hour off UTC opens on the half hour.
    india = policy(delete_at_hours=[0], timezone="Asia/Kolkata")
    assert next_delete_window(india, utc(2026, 1, 10, 12, 7)) == utc(2026, 1, 10, 18, 30)
    assert next_delete_window(policy(delete_at_hours=[]), utc(2026, 1, 10, 12)) is None
