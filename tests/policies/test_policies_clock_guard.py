"""policies.clock_guard and the planner with a trusted now: after a forward clock step, only what
was due before it goes (unless what overrides ``reserved`` forces), and no group turns stale by it."""

from __future__ import annotations

from datetime import timedelta

from plan_builders import DAY, NOW, disk, group, log, policies, policy, plan_by_policy

from policies import (ACTIVE, CLOCK_STEP, DELETE, DISK_FORCE, KEEP, MANUAL, PREFIX, RESERVED, ClockMark,
                      ManualTrigger, age_reason, forward_step, held_trusted, judged_at, start_reference,
                      unconsumed)

YEAR_AHEAD = NOW + timedelta(days=365)
BIG = 5000


def outcome(log_plan):
    return [(d.action, d.reasons) for d in log_plan.decisions]


def plan_at(snapshot, now, trusted=None, manual=None, **overrides):
    manual = {"default": manual} if manual else {}
    return plan_by_policy([snapshot], policies(default=policy(**overrides)), now, manual,
                          trusted_now=trusted).log(snapshot.name)


def test_a_forward_step_beyond_the_threshold_is_a_step_and_a_backward_one_is_not():
    assert forward_step(1000.0, 1000.0 + 365 * DAY, DAY) == 365 * DAY
    assert forward_step(1000.0, 1000.0 + DAY, DAY) is None          # at the threshold: not beyond it
    assert forward_step(1000.0, 1000.0 - 365 * DAY, DAY) is None    # back: deletion is only delayed


def test_expiry_is_judged_at_the_trusted_time_when_it_is_earlier():
    assert judged_at(YEAR_AHEAD, NOW) == NOW
    assert judged_at(NOW, YEAR_AHEAD) == NOW
    assert judged_at(NOW, None) == NOW
    assert age_reason(100.0, 200.0, 150.0) == CLOCK_STEP
    assert age_reason(100.0, 120.0, 150.0) == RESERVED
    assert age_reason(160.0, 170.0, 150.0) is None


def test_a_year_ahead_a_manual_pass_deletes_only_what_was_due_before_the_step():
    snapshot = log([100, 5, 1], used_ratio=0.5)       # 72 h reserve: the 100 h segment was due
    blind = plan_at(snapshot, YEAR_AHEAD, manual=ManualTrigger.open(1))
    assert [a for a, _ in outcome(blind)] == [DELETE, DELETE, KEEP]   # what the guard prevents
    guarded = plan_at(snapshot, YEAR_AHEAD, NOW, manual=ManualTrigger.open(1))
    assert outcome(guarded) == [(DELETE, ()), (KEEP, (CLOCK_STEP,)), (KEEP, (ACTIVE, CLOCK_STEP, PREFIX))]
    assert "ahead of the trusted time" in guarded.decisions[1].details[CLOCK_STEP]


def test_a_year_ahead_a_reading_group_does_not_turn_stale():
    snapshot = log([100, 90, 1], used_ratio=0.5, groups=[group("etl", 100, idle_hours=1)])
    blind = plan_at(snapshot, YEAR_AHEAD, manual=ManualTrigger.open(1, force=True))
    assert blind.stale_groups == ("etl",) and len(blind.to_delete) == 2      # etl's unread data gone
    guarded = plan_at(snapshot, YEAR_AHEAD, NOW, manual=ManualTrigger.open(1, force=True))
    assert guarded.stale_groups == ()
    assert outcome(guarded)[:2] == [(DELETE, ()), (KEEP, (unconsumed("etl"),))]


def test_disk_pressure_still_forces_within_its_own_rules():
    snapshot = log([100, 5, 1], used_ratio=0.95, segment_bytes=BIG, groups=[group("etl", 150)])
    guarded = plan_at(snapshot, YEAR_AHEAD, NOW, disk={"force_target": 0.85})
    today = plan_at(snapshot, NOW, disk={"force_target": 0.85})
    # The same deletions as without a step: 95 % -> 90 % -> 85 %, unexpired and unconsumed data too.
    assert [a for a, _ in outcome(guarded)] == [a for a, _ in outcome(today)] == [DELETE, DELETE, KEEP]
    second = guarded.decisions[1]
    assert second.overridden_by == DISK_FORCE and CLOCK_STEP in second.overridden


def test_a_trusted_time_after_now_changes_nothing():
    snapshot = log([100, 5, 1], used_ratio=0.5)
    assert outcome(plan_at(snapshot, NOW, YEAR_AHEAD, manual=ManualTrigger.open(1))) == \
        outcome(plan_at(snapshot, NOW, manual=ManualTrigger.open(1)))


def test_a_manual_force_overrides_the_clock_step_as_it_does_reserved():
    snapshot = log([100, 5, 1], used_ratio=0.5)
    guarded = plan_at(snapshot, YEAR_AHEAD, NOW, manual=ManualTrigger.open(1, force=True))
    assert [a for a, _ in outcome(guarded)] == [DELETE, DELETE, KEEP]
    assert guarded.decisions[1].overridden == (CLOCK_STEP,) and guarded.decisions[1].overridden_by == MANUAL


def test_on_the_same_boot_the_start_reference_is_the_mark_plus_the_boot_clock_however_old_the_disk():
    mark = ClockMark(wall=1000.0, uptime=50.0, boot_id="b1")
    assert start_reference(mark, "b1", 50.0 + 3 * DAY, 1000.0) == (1000.0 + 3 * DAY, True)
    assert start_reference(mark, "b1", 60.0, 1000.0 + 365 * DAY) == (1010.0, True)   # the disk is not asked


def test_after_a_reboot_the_start_reference_is_the_newest_of_the_mark_and_the_disk():
    mark = ClockMark(wall=1000.0, uptime=5 * DAY, boot_id="b1")
    assert start_reference(mark, "b2", 30.0, 900.0) == (1000.0, False)
    assert start_reference(mark, "b2", 30.0, 2000.0) == (2000.0, False)
    assert start_reference(mark, None, 5 * DAY + 1, 900.0) == (1000.0, False)       # no boot id: no proof
    assert start_reference(mark, "b1", 10.0, 900.0) == (1000.0, False)              # a boot clock gone back
    assert start_reference(None, "b1", 10.0, 900.0) == (900.0, False)
    assert start_reference(None, "b1", 10.0, None) == (None, False)


def test_a_held_mark_resumes_its_trusted_time_on_the_same_boot_and_after_a_reboot_whatever_the_disk():
    held = ClockMark(1000.0, 50.0, "b1", 365 * DAY)
    assert held_trusted(held, "b1", 50.0 + 3600) == 1000.0 + 3600     # the boot clock's time since
    assert held_trusted(held, "b2", 30.0) == 1000.0                    # the recorded trusted time itself
    assert held_trusted(held, "b1", 10.0) == 1000.0                    # a boot clock gone back: another boot
    assert held_trusted(ClockMark(1000.0, 50.0, "b1"), "b1", 60.0) is None     # nothing held
    assert held_trusted(None, "b1", 60.0) is None
