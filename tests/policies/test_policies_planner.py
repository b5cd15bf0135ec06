"""The planner, rule by rule, with an injected clock and hand-made snapshots."""

from __future__ import annotations

import dataclasses

import json
from datetime import datetime

import pytest
from policies.units import format_hours
from plan_builders import NOW, WINDOW_NOW, disk, group, hung, log, policies, policy, plan_by_policy

from policies import (
    ACTIVE,
    BATCH_LIMIT,
    DELETE,
    DISK_CLEAN,
    DISK_FORCE,
    EXPIRED,
    HELD,
    KEEP,
    MANUAL,
    NO_TRIGGER,
    PREFIX,
    REFUSE_WRITES,
    RESERVED,
    TIME_WINDOW,
    DiskSnapshot,
    LogSnapshot,
    ManualTrigger,
    SegmentSnapshot,
    UnconsumedRange,
    unconsumed,
)

BIG = 5000  # with the default 100 000-byte disk, each deletion frees 5 %


def outcome(log_plan):
    return [(decision.action, decision.reasons) for decision in log_plan.decisions]


# Force only down to force_ratio, for tests about other rules than the low-water mark.
TARGET_85 = {"disk": {"force_target": 0.85}}


def plan_one(snapshot, *, at: datetime = NOW, manual=None, **policy_overrides):
    configured = policies(default=policy(**policy_overrides)) if policy_overrides else policies()
    return plan_by_policy([snapshot], configured, at, manual or {}).logs[0]


# --- triggers and age ----------------------------------------------------------------------------------


def test_keeps_everything_without_a_trigger():
    result = plan_one(log([100, 90, 1], used_ratio=0.5))
    assert result.triggers == ()
    assert outcome(result) == [
        (KEEP, (NO_TRIGGER,)),
        (KEEP, (NO_TRIGGER, PREFIX)),
        (KEEP, (ACTIVE, NO_TRIGGER, RESERVED, PREFIX)),
    ]


def test_deletes_expired_segments_oldest_first_in_the_time_window():
    result = plan_one(log([100, 80, 73, 10, 1], at=WINDOW_NOW), at=WINDOW_NOW)
    assert result.triggers == (TIME_WINDOW,)
    assert outcome(result) == [
        (DELETE, ()),
        (DELETE, ()),
        (DELETE, ()),
        (KEEP, (RESERVED,)),
        (KEEP, (ACTIVE, RESERVED, PREFIX)),
    ]
    assert [decision.base_offset for decision in result.to_delete] == [0, 100, 200]
    assert result.freed_bytes == 3000


def test_a_segment_expires_exactly_reserve_after_its_last_write():
    result = plan_one(log([72, 72 - 1 / 3600, 1], used_ratio=0.8))
    assert outcome(result)[:2] == [(DELETE, ()), (KEEP, (RESERVED,))]


def test_disk_clean_deletes_only_expired_segments_at_any_hour():
    result = plan_one(log([80, 50, 1], used_ratio=0.76))
    assert result.triggers == (DISK_CLEAN,)
    assert outcome(result) == [(DELETE, ()), (KEEP, (RESERVED,)), (KEEP, (ACTIVE, RESERVED, PREFIX))]


def test_a_young_segment_behind_a_kept_one_is_both_reserved_and_prefix():
    result = plan_one(log([100, 10, 90, 5, 1], used_ratio=0.8))
    assert outcome(result) == [
        (DELETE, ()),
        (KEEP, (RESERVED,)),
        (KEEP, (PREFIX,)),
        (KEEP, (RESERVED, PREFIX)),
        (KEEP, (ACTIVE, RESERVED, PREFIX)),
    ]


def test_never_deletes_the_active_segment():
    result = plan_one(log([100, 100], used_ratio=0.99))
    assert outcome(result) == [(DELETE, ()), (KEEP, (ACTIVE,))]


def test_treats_the_last_segment_as_active_even_when_not_flagged():
    flagged = log([100, 100], used_ratio=0.8)
    unflagged = LogSnapshot(
        name=flagged.name,
        path=flagged.path,
        policy="default",
        segments=tuple(SegmentSnapshot(**{**vars(segment), "active": False}) for segment in flagged.segments),
        groups=(),
        disk=flagged.disk,
    )
    assert outcome(plan_one(unflagged)) == [(DELETE, ()), (KEEP, (ACTIVE,))]


def test_batch_limit_caps_deletions_per_log_per_pass():
    result = plan_one(log([100] * 6 + [1], used_ratio=0.8), files_per_pass=3)
    assert outcome(result) == [
        (DELETE, ()),
        (DELETE, ()),
        (DELETE, ()),
        (KEEP, (BATCH_LIMIT,)),
        (KEEP, (PREFIX, BATCH_LIMIT)),
        (KEEP, (PREFIX, BATCH_LIMIT)),
        (KEEP, (ACTIVE, RESERVED, PREFIX, BATCH_LIMIT)),
    ]


def test_an_empty_log_has_nothing_to_decide():
    empty = LogSnapshot(name="empty", path="/logs/empty", policy="default", segments=(), groups=(), disk=disk(0.99))
    result = plan_one(empty)
    assert (result.decisions, result.freed_bytes) == ((), 0)


# --- manual trigger ------------------------------------------------------------------------------------


def test_manual_trigger_deletes_expired_segments_outside_the_window():
    result = plan_one(log([100, 5, 1]), manual={"default": ManualTrigger.open(20)})
    assert result.triggers == (MANUAL,)
    assert outcome(result) == [(DELETE, ()), (KEEP, (RESERVED,)), (KEEP, (ACTIVE, RESERVED, PREFIX))]


def test_an_exhausted_manual_trigger_deletes_nothing():
    result = plan_one(log([100, 1]), manual={"default": ManualTrigger.open(1).after_pass()})
    assert outcome(result)[0] == (KEEP, (NO_TRIGGER,))


def test_manual_trigger_applies_only_to_its_policy():
    snapshots = [log([100, 1], name="a"), log([100, 1], name="b", policy_name="other")]
    result = plan_by_policy(snapshots, policies(other=policy()), NOW, {"other": ManualTrigger.open(5)})
    assert [log_plan.triggers for log_plan in result.logs] == [(), (MANUAL,)]
    assert [len(log_plan.to_delete) for log_plan in result.logs] == [0, 1]


def test_manual_force_ignores_age_but_not_consumers():
    snapshot = log([5, 4, 3, 1], groups=[group("etl", 150)])
    result = plan_one(snapshot, manual={"default": ManualTrigger.open(20, force=True)})
    etl = unconsumed("etl")
    assert outcome(result) == [
        (DELETE, ()),
        (KEEP, (etl,)),
        (KEEP, (etl, PREFIX)),
        (KEEP, (ACTIVE, etl, PREFIX)),
    ]
    first = result.decisions[0]
    assert (first.overridden, first.overridden_by) == ((RESERVED,), MANUAL)


# --- consumers -----------------------------------------------------------------------------------------


def test_keeps_segments_a_group_has_not_consumed():
    # etl has consumed everything below 200: the segment [100, 200) is consumed, [200, 300) is not.
    result = plan_one(log([100, 100, 100, 1], used_ratio=0.8, groups=[group("etl", 200)]))
    etl = unconsumed("etl")
    assert outcome(result) == [(DELETE, ()), (DELETE, ()), (KEEP, (etl,)), (KEEP, (ACTIVE, RESERVED, etl, PREFIX))]
    assert result.decisions[2].unconsumed == (UnconsumedRange("etl", 200, 300),)


def test_every_group_that_needs_a_segment_is_listed():
    snapshot = log([100, 100, 1], used_ratio=0.8, groups=[group("zeta", 50), group("etl", 0), group("done", 10**6)])
    result = plan_one(snapshot)
    assert result.decisions[0].reasons == (unconsumed("etl"), unconsumed("zeta"))
    assert result.decisions[0].unconsumed == (UnconsumedRange("etl", 0, 100), UnconsumedRange("zeta", 50, 100))


def test_disk_force_overrides_consumer_protection_and_records_the_lost_offsets():
    snapshot = log([100, 100, 100, 1], used_ratio=0.95, segment_bytes=BIG, groups=[group("etl", 50)])
    result = plan_one(snapshot, **TARGET_85)
    etl = unconsumed("etl")
    assert result.triggers == (DISK_CLEAN, DISK_FORCE, REFUSE_WRITES)
    assert outcome(result) == [(DELETE, ()), (DELETE, ()), (KEEP, (etl,)), (KEEP, (ACTIVE, RESERVED, etl, PREFIX))]
    first, second = result.decisions[:2]
    assert (first.overridden, first.overridden_by, first.unconsumed) == ((etl,), DISK_FORCE, (UnconsumedRange("etl", 50, 100),))
    assert second.unconsumed == (UnconsumedRange("etl", 100, 200),)


def test_stale_group_protects_nothing_and_is_listed():
    groups = [group("etl", 10**6), group("old", 0, idle_hours=7 * 24 + 1)]
    result = plan_one(log([100, 100, 1], used_ratio=0.8, groups=groups))
    assert result.stale_groups == ("old",)
    assert outcome(result)[:2] == [(DELETE, ()), (DELETE, ())]
    # Data a stale group never read is still recorded for the audit trail.
    assert result.decisions[0].unconsumed == (UnconsumedRange("old", 0, 100),)


def test_a_group_silent_exactly_consumer_ttl_still_protects():
    result = plan_one(log([100, 1], used_ratio=0.8, groups=[group("etl", 0, idle_hours=7 * 24)]))
    assert result.stale_groups == ()
    assert result.decisions[0].reasons == (unconsumed("etl"),)


def test_without_protect_unconsumed_groups_only_feed_the_audit():
    result = plan_one(log([100, 1], used_ratio=0.8, groups=[group("etl", 0)]), protect_unconsumed=False)
    assert outcome(result)[0] == (DELETE, ())
    assert result.decisions[0].unconsumed == (UnconsumedRange("etl", 0, 100),)
    assert result.decisions[0].overridden == ()


# --- disk force ----------------------------------------------------------------------------------------


def test_deletes_oldest_first_when_disk_forces():
    result = plan_one(log([5, 4, 3, 2, 1], used_ratio=0.95, segment_bytes=BIG), **TARGET_85)
    # 95 % used; two 5 % segments bring it to 85 %, which is no longer above force_target.
    assert outcome(result) == [
        (DELETE, ()),
        (DELETE, ()),
        (KEEP, (RESERVED,)),
        (KEEP, (RESERVED, PREFIX)),
        (KEEP, (ACTIVE, RESERVED, PREFIX)),
    ]
    assert [(d.overridden, d.overridden_by) for d in result.to_delete] == [((RESERVED,), DISK_FORCE)] * 2


def test_disk_force_continues_while_projected_ratio_is_above_force_target():
    one_byte_more = DiskSnapshot(filesystem_id=1, total_bytes=100_000, used_bytes=95_001, free_bytes=4_999)
    result = plan_one(log([5, 4, 3, 2, 1], segment_bytes=BIG, disk_snapshot=one_byte_more), **TARGET_85)
    assert [decision.action for decision in result.decisions] == [DELETE, DELETE, DELETE, KEEP, KEEP]


def test_disk_force_counts_the_index_files_freed_with_the_segments():
    # 95,001 bytes used: three 5,000-byte segments alone leave 80,001, above 80 %; with their
    # 1-byte index files counted, three deletions reach 79,998: a fourth would go one too far.
    one_byte_more = DiskSnapshot(filesystem_id=1, total_bytes=100_000, used_bytes=95_001, free_bytes=4_999)
    bare = log([5, 4, 3, 2, 1, 1], segment_bytes=BIG, disk_snapshot=one_byte_more)
    target_80 = {"disk": {"force_ratio": 0.85, "force_target": 0.80}}
    assert [d.action for d in plan_one(bare, **target_80).decisions][:4] == [DELETE] * 4
    indexed = dataclasses.replace(bare, segments=tuple(dataclasses.replace(s, index_bytes=1) for s in bare.segments))
    decisions = plan_one(indexed, **target_80).decisions
    assert [d.action for d in decisions][:4] == [DELETE, DELETE, DELETE, KEEP]
    assert [d.index_bytes for d in decisions] == [1] * 6


def test_after_the_force_expired_segments_still_go_under_disk_clean():
    result = plan_one(log([5, 100, 100, 4, 1], used_ratio=0.9, segment_bytes=BIG))
    # The young head is forced out (90 % -> 85 %); the expired ones behind it go as ordinary cleanup.
    assert outcome(result) == [
        (DELETE, ()),
        (DELETE, ()),
        (DELETE, ()),
        (KEEP, (RESERVED,)),
        (KEEP, (ACTIVE, RESERVED, PREFIX)),
    ]
    assert [decision.overridden for decision in result.to_delete] == [(RESERVED,), (), ()]


def test_refused_writes_without_disk_force_delete_only_expired_consumed_segments():
    # disk.force off promises that pressure deletes only expired segments: above refuse_writes_ratio
    # the writers are refused, and nothing unexpired (5 h) or unconsumed (etl at offset 50) goes.
    segs = log([100, 90, 5, 1], used_ratio=0.95, segment_bytes=BIG)
    result = plan_one(segs, disk={"force": False})
    assert result.triggers == (DISK_CLEAN, REFUSE_WRITES)
    assert outcome(result) == [(DELETE, ()), (DELETE, ()), (KEEP, (RESERVED,)), (KEEP, (ACTIVE, RESERVED, PREFIX))]
    assert result.decisions[0].because == (EXPIRED, DISK_CLEAN, REFUSE_WRITES)
    assert result.decisions[0].overridden_by is None
    lagging = log([100, 90, 5, 1], used_ratio=0.95, segment_bytes=BIG, groups=[group("etl", 150)])
    kept = plan_one(lagging, disk={"force": False})
    assert outcome(kept)[:2] == [(DELETE, ()), (KEEP, (unconsumed("etl"),))]


def test_without_disk_force_pressure_below_refuse_writes_deletes_only_expired_segments():
    result = plan_one(log([100, 5, 1], used_ratio=0.88, segment_bytes=BIG), disk={"force": False})
    assert result.triggers == (DISK_CLEAN,)
    assert outcome(result) == [(DELETE, ()), (KEEP, (RESERVED,)), (KEEP, (ACTIVE, RESERVED, PREFIX))]


def test_two_logs_on_one_filesystem_lose_their_globally_oldest_segments_first():
    shared = disk(0.95)
    a = log([50, 30, 10, 1], name="a", disk_snapshot=shared, segment_bytes=BIG)
    b = log([40, 20, 1], name="b", disk_snapshot=shared, segment_bytes=BIG)
    result = plan_by_policy([a, b], policies(default=policy(**TARGET_85)), NOW)
    # Oldest overall: a/0 (50h) then b/0 (40h), which bring the disk to 85 %; a/1 (30h) stays.
    assert outcome(result.log("a")) == [
        (DELETE, ()),
        (KEEP, (RESERVED,)),
        (KEEP, (RESERVED, PREFIX)),
        (KEEP, (ACTIVE, RESERVED, PREFIX)),
    ]
    assert outcome(result.log("b")) == [(DELETE, ()), (KEEP, (RESERVED,)), (KEEP, (ACTIVE, RESERVED, PREFIX))]


def test_shared_filesystem_takes_each_log_only_from_its_head():
    shared = disk(0.95)
    # a's oldest segment sits behind a young head, so it cannot go before that head does.
    a = log([10, 80, 1], name="a", disk_snapshot=shared, segment_bytes=BIG)
    b = log([30, 20, 1], name="b", disk_snapshot=shared, segment_bytes=BIG)
    result = plan_by_policy([a, b], policies(default=policy(**TARGET_85)), NOW)
    assert [d.action for d in result.log("b").decisions] == [DELETE, DELETE, KEEP]
    assert outcome(result.log("a")) == [(KEEP, (RESERVED,)), (KEEP, (PREFIX,)), (KEEP, (ACTIVE, RESERVED, PREFIX))]


def test_shared_filesystem_keeps_each_logs_own_batch_limit():
    shared = disk(0.97)  # three 5 % deletions are needed to reach 85 %
    a = log([50, 30, 1], name="a", disk_snapshot=shared, segment_bytes=BIG)
    b = log([40, 20, 1], name="b", disk_snapshot=shared, segment_bytes=BIG)
    result = plan_by_policy([a, b], policies(default=policy(files_per_pass=1)), NOW)
    for name in ("a", "b"):
        # The force still holds, so the young second segment is kept only by the batch limit.
        assert outcome(result.log(name))[:2] == [(DELETE, ()), (KEEP, (BATCH_LIMIT,))]


def test_shared_filesystem_applies_each_policys_force_ratio():
    shared = disk(0.95)
    lenient = policy(disk={"force_ratio": 0.92, "refuse_writes_ratio": 0.96, "force_target": 0.92})
    a = log([50, 30, 1], name="a", disk_snapshot=shared, segment_bytes=BIG)
    b = log([40, 20, 1], name="b", disk_snapshot=shared, segment_bytes=BIG, policy_name="lenient")
    result = plan_by_policy([a, b], policies(default=policy(**TARGET_85), lenient=lenient), NOW)
    # a/0 goes (95 % > 85 %), then b/0 sees 90 %, not above its 92 %; a/1 still sees 90 % > 85 %.
    assert [d.action for d in result.log("a").decisions] == [DELETE, DELETE, KEEP]
    assert outcome(result.log("b"))[0] == (KEEP, (RESERVED,))


def test_logs_on_different_filesystems_are_independent():
    a = log([5, 4, 3, 1], name="a", disk_snapshot=disk(0.95, filesystem_id=1), segment_bytes=BIG)
    b = log([5, 4, 3, 1], name="b", disk_snapshot=disk(0.95, filesystem_id=2), segment_bytes=BIG)
    c = log([5, 4, 1], name="c", disk_snapshot=disk(0.5, filesystem_id=3), segment_bytes=BIG)
    result = plan_by_policy([a, b, c], policies(default=policy(**TARGET_85)), NOW)
    assert [len(result.log(name).to_delete) for name in "abc"] == [2, 2, 0]


# --- force_target, the low-water mark ------------------------------------------------------------------


def test_a_forced_pass_deletes_down_to_clean_ratio_by_default():
    # 95 % used, 5 % segments: 90, 85, 80 are still above the 75 % default target, 75 is not.
    result = plan_one(log([9, 8, 7, 6, 5, 4, 1], used_ratio=0.95, segment_bytes=BIG))
    assert [d.action for d in result.decisions] == [DELETE] * 4 + [KEEP] * 3
    assert outcome(result)[4] == (KEEP, (RESERVED,))


def test_force_target_is_the_low_water_mark():
    result = plan_one(log([9, 8, 7, 6, 5, 4, 1], used_ratio=0.95, segment_bytes=BIG), disk={"force_target": 0.8})
    assert [d.action for d in result.decisions] == [DELETE] * 3 + [KEEP] * 4


def test_force_target_stops_exactly_at_the_target_and_not_one_byte_above():
    # used 80,001 of 100,000 bytes after three 5,000-byte deletions: still above 0.80, so a fourth goes.
    one_byte_more = DiskSnapshot(filesystem_id=1, total_bytes=100_000, used_bytes=95_001, free_bytes=4_999)
    above = plan_one(log([9, 8, 7, 6, 5, 1], segment_bytes=BIG, disk_snapshot=one_byte_more),
                     disk={"force_target": 0.8})
    assert [d.action for d in above.decisions] == [DELETE] * 4 + [KEEP] * 2
    exact = DiskSnapshot(filesystem_id=1, total_bytes=100_000, used_bytes=95_000, free_bytes=5_000)
    at = plan_one(log([9, 8, 7, 6, 5, 1], segment_bytes=BIG, disk_snapshot=exact), disk={"force_target": 0.8})
    assert [d.action for d in at.decisions] == [DELETE] * 3 + [KEEP] * 3


def test_force_target_does_not_start_a_force_below_force_ratio():
    # 84 % is above the 75 % target but not above force_ratio: no disk-force, young segments stay.
    result = plan_one(log([9, 8, 1], used_ratio=0.84, segment_bytes=BIG))
    assert DISK_FORCE not in result.triggers
    assert [d.action for d in result.decisions] == [KEEP] * 3


def test_force_target_equal_to_force_ratio_is_the_old_behaviour():
    result = plan_one(log([9, 8, 7, 6, 1], used_ratio=0.95, segment_bytes=BIG), disk={"force_target": 0.85})
    assert [d.action for d in result.decisions] == [DELETE] * 2 + [KEEP] * 3


def test_force_target_still_leaves_batch_limit_and_active_in_place():
    result = plan_one(log([9, 8, 7, 6, 5, 1], used_ratio=0.95, segment_bytes=BIG), files_per_pass=2)
    assert outcome(result)[2] == (KEEP, (BATCH_LIMIT,))
    assert outcome(result)[-1][1][0] == ACTIVE


# --- held segments -------------------------------------------------------------------------------------


HUNG_POLICY = {"hung": {"force_after": "600s", "retry_every": "120s"}}


def test_a_held_segment_is_kept_until_retry_every_and_stops_the_walk():
    snapshot = log([100, 100, 1], used_ratio=0.8, hung_segments={0: hung(300, 119)})
    result = plan_one(snapshot, **HUNG_POLICY)
    assert outcome(result) == [(KEEP, (HELD,)), (KEEP, (PREFIX,)), (KEEP, (ACTIVE, RESERVED, PREFIX))]


def test_a_held_segment_is_retried_after_retry_every():
    result = plan_one(log([100, 100, 1], used_ratio=0.8, hung_segments={0: hung(300, 120)}), **HUNG_POLICY)
    first = result.decisions[0]
    assert (first.action, first.retry, first.forced) == (DELETE, True, False)
    assert result.decisions[1].action == DELETE


def test_a_held_segment_is_forced_after_force_after():
    result = plan_one(log([100, 1], used_ratio=0.8, hung_segments={0: hung(600, 10)}), **HUNG_POLICY)
    first = result.decisions[0]
    assert (first.action, first.retry, first.forced) == (DELETE, True, True)


def test_a_held_segment_waits_for_a_trigger_like_any_other():
    result = plan_one(log([100, 1], used_ratio=0.5, hung_segments={0: hung(900, 900)}), **HUNG_POLICY)
    first = result.decisions[0]
    assert (first.action, first.reasons, first.forced) == (KEEP, (NO_TRIGGER,), False)


def test_an_ordinary_deletion_is_neither_retried_nor_forced():
    first = plan_one(log([100, 1], used_ratio=0.8)).decisions[0]
    assert (first.action, first.retry, first.forced) == (DELETE, False, False)


# --- output --------------------------------------------------------------------------------------------


def test_plan_json_has_the_command_line_shape():
    snapshot = log([100, 1], used_ratio=0.8, segment_bytes=BIG)
    document = plan_by_policy([snapshot], policies(), NOW).to_json_dict()
    assert json.loads(json.dumps(document)) == document
    assert document == {
        "at": "2026-01-10T12:00:00+00:00",
        "logs": [
            {
                "name": "staging",
                "path": "/logs/staging",
                "disk": {"used_ratio": 0.8, "total_bytes": 100_000, "free_bytes": 20_000},
                "triggers": ["disk-clean"],
                "files": [
                    {
                        "segment": "00000000000000000000.log",
                        "base_offset": 0,
                        "bytes": BIG,
                        "action": "delete",
                        "reasons": [],
                        "live_bytes": None,
                        "live_ratio": None,
                        "because": ["expired", "disk-clean"],
                        "details": {"expired": "4d4h since its last write, reserve 3d",
                                    "disk-clean": "disk 80.0% used, above clean_ratio 75%"},
                    },
                    {
                        "segment": "00000000000000000100.log",
                        "base_offset": 100,
                        "bytes": BIG,
                        "action": "keep",
                        "reasons": ["active", "reserved"],
                        "live_bytes": None,
                        "live_ratio": None,
                        "details": {"active": "the segment being written", "reserved": "younger than 3d, 1h old"},
                    },
                ],
                "deleted": 1,
                "freed_bytes": BIG,
            }
        ],
    }


def test_explains_each_decision_in_one_plain_line():
    snapshot = log([100, 3 + 12 / 60, 1], used_ratio=0.88, groups=[group("etl", 150)])
    lines = plan_one(snapshot, disk={"force": False}).explain().splitlines()
    assert lines[0] == "staging (policy default): disk 88.0% used, triggers disk-clean, 1 to delete (1000B)"
    assert lines[1] == ("staging 00000000000000000000.log delete: expired (4d4h since its last write, reserve 3d), "
                        "disk-clean (disk 88.0% used, above clean_ratio 75%)")
    assert lines[2] == (
        "staging 00000000000000000100.log keep: reserved (younger than 3d, 3h12m old), "
        "unconsumed:etl (etl has not consumed offsets 150 to 199)"
    )
    assert lines[3].startswith("staging 00000000000000000200.log keep: active (the segment being written), reserved")
    assert lines[3].endswith("prefix (00000000000000000100.log is kept)")


def test_explains_what_a_forced_deletion_overrides():
    snapshot = log([5, 1], used_ratio=0.95, segment_bytes=BIG, groups=[group("etl", 0)])
    line = plan_one(snapshot).decisions[0].explain()
    assert line == (
        "staging 00000000000000000000.log delete: disk-force (disk 95.0% used before it, deleting down "
        "to 75%) overrides reserved (younger than 3d, 5h old), "
        "unconsumed:etl (etl has not consumed offsets 0 to 99)"
    )


def test_explains_held_segments():
    held = plan_one(log([100, 1], used_ratio=0.8, hung_segments={0: hung(30, 30)})).decisions[0]
    assert held.explain() == "staging 00000000000000000000.log keep: held (held for 30s, next attempt in 1m30s)"
    forced = plan_one(log([100, 1], used_ratio=0.8, hung_segments={0: hung(130, 5)})).decisions[0]
    assert forced.explain() == ("staging 00000000000000000000.log delete: expired (4d4h since its last write, "
                                "reserve 3d), disk-clean (disk 80.0% used, above clean_ratio 75%), "
                                "forced (held for 2m10s, past force_after 2m)")


def test_every_deletion_says_why_with_its_figures():
    window = plan_one(log([100, 1], used_ratio=0.1), delete_at_hours=[12], timezone="UTC").decisions[0]
    assert window.because == ("expired", "time-window")
    assert window.details["time-window"] == "hour 12 is in delete_at_hours 12"
    assert format_hours(range(24)) == "00-23" and format_hours([9, 10, 11, 22, 4]) == "04;09-11;22"
    capped = plan_one(log([2, 1], used_ratio=0.1, segment_bytes=BIG), retention_bytes=BIG).decisions[0]
    assert capped.because == ("size-cap",) and capped.overridden == ("reserved",)
    assert capped.details["size-cap"].startswith("size ") and "> retention_bytes" in capped.details["size-cap"]
    manual = plan_by_policy([log([100, 1], used_ratio=0.1)], policies(), NOW,
                  {"default": ManualTrigger.open(3)}).logs[0].decisions[0]
    assert manual.because == ("expired", "manual")
    assert manual.details["manual"] == "an operator's request, 2 more passes of it after this one"
    last = plan_by_policy([log([100, 1], used_ratio=0.1)], policies(), NOW,
                {"default": ManualTrigger.open(1, force=True)}).logs[0].decisions[0]
    assert last.details["manual"] == "an operator's request, its last pass, forcing"
    forced = plan_one(log([100, 1], used_ratio=0.95, segment_bytes=BIG)).decisions[0]
    assert forced.because == ("expired", "disk-force") and "deleting down to 75%" in forced.details["disk-force"]
    for decision in (window, capped, manual, forced):
        assert set(decision.because) <= set(decision.details)


def test_stale_groups_appear_in_the_explanation():
    result = plan_one(log([1], groups=[group("old", 0, idle_hours=1000)]))
    assert result.explain().splitlines()[0].endswith("; stale consumer groups, not protecting: old")


# --- contract of the function --------------------------------------------------------------------------


def test_rejects_a_log_without_a_policy_in_force():
    with pytest.raises(ValueError, match="log staging \\(policy 'nightly'\\) has no policy in force"):
        plan_by_policy([log([1], policy_name="nightly")], policies(), NOW)


def test_rejects_a_naive_time():
    with pytest.raises(ValueError, match="aware datetime"):
        plan_by_policy([log([1])], policies(), datetime(2026, 1, 10, 12))


def test_rejects_two_logs_with_one_name():
    with pytest.raises(ValueError, match="log names repeat"):
        plan_by_policy([log([1]), log([1])], policies(), NOW)


def test_same_inputs_give_the_same_plan():
    snapshots = [log([100, 50, 1], name="a", used_ratio=0.95), log([90, 1], name="b", used_ratio=0.95)]
    assert plan_by_policy(snapshots, policies(), NOW) == plan_by_policy(snapshots, policies(), NOW)


def test_plan_results_are_immutable():
    result = plan_by_policy([log([100, 1], used_ratio=0.8)], policies(), NOW)
    with pytest.raises(AttributeError):
        result.logs[0].decisions[0].action = KEEP  # type: ignore[misc]
    with pytest.raises(TypeError):
        result.logs[0].decisions[0].details["x"] = "y"  # type: ignore[index]


def test_json_counts_deletions_an_executor_reports_as_done():
    from dataclasses import replace

    from policies import DELETED, HUNG, LogPlan

    planned = plan_by_policy([log([100, 100, 1], used_ratio=0.8)], policies(), NOW).logs[0]
    first, second, active = planned.decisions
    done = LogPlan(**{**vars(planned), "decisions": (replace(first, action=DELETED), replace(second, action=HUNG), active)})
    document = done.to_json_dict()
    assert [entry["action"] for entry in document["files"]] == ["deleted", "hung", "keep"]
    assert (document["deleted"], document["freed_bytes"]) == (1, 1000)


# --- compacted logs: explicit end offsets, gaps, small segments, live bytes ----------------------------


def _compacted_log(committed: int) -> LogSnapshot:
    """Segment 0 compacted to [0, 60) and 400 bytes; [60, 100) vanished into a gap; 100 and the
    active 200 whole."""
    hour = 3600.0
    now = NOW.timestamp()
    segs = [SegmentSnapshot(0, 60, "/logs/staging/00000000000000000000.log", 400, now - 100 * hour, False,
                            used_bytes=396, live_bytes=396),
            SegmentSnapshot(100, 200, "/logs/staging/00000000000000000100.log", 1000, now - 99 * hour, False,
                            used_bytes=990, live_bytes=330),
            SegmentSnapshot(200, 210, "/logs/staging/00000000000000000200.log", 1000, now - 1 * hour, True,
                            used_bytes=100, live_bytes=100)]
    return LogSnapshot("staging", "/logs/staging", "default", segs, [group("etl", committed)], disk(0.8))


def test_a_group_committed_inside_a_gap_has_consumed_the_compacted_segment_before_it():
    result = plan_by_policy([_compacted_log(committed=80)], policies(), NOW).log("staging")
    first, second = result.decisions[:2]
    assert (first.action, first.end_offset, first.unconsumed) == (DELETE, 60, ())
    # The next segment starts after the gap: none of its offsets is consumed.
    assert (second.action, second.reasons) == (KEEP, ("unconsumed:etl",))
    assert second.details["unconsumed:etl"] == "etl has not consumed offsets 100 to 199"


def test_a_group_committed_inside_a_compacted_segment_still_protects_it():
    result = plan_by_policy([_compacted_log(committed=59)], policies(), NOW).log("staging")
    assert result.decisions[0].reasons == ("unconsumed:etl",)
    assert result.decisions[0].details["unconsumed:etl"] == "etl has not consumed offsets 59 to 59"


def test_a_compacted_segment_frees_its_own_size_and_reports_its_live_share():
    result = plan_by_policy([_compacted_log(committed=1000)], policies(), NOW).log("staging")
    assert [d.action for d in result.decisions] == [DELETE, DELETE, KEEP]
    assert result.freed_bytes == 1400
    files = result.to_json_dict()["files"]
    assert [(f["bytes"], f["live_bytes"], f["live_ratio"]) for f in files] == [
        (400, 396, 1.0), (1000, 330, pytest.approx(1 / 3)), (1000, 100, 1.0)]


def test_live_bytes_above_used_bytes_is_refused():
    with pytest.raises(ValueError, match="live_bytes <= used_bytes"):
        SegmentSnapshot(0, 10, "/l/00000000000000000000.log", 100, 0.0, False, used_bytes=10, live_bytes=11)
