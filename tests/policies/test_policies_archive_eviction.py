"""Eviction with an archive tier: local retention deletes archived segments only (`archived` in
their `because`), keeps the others (`not-archived`) unless the disk forces, and a force takes the
archived segments of every log on the disk before it forces an unarchived one."""

from __future__ import annotations

from dataclasses import replace

from plan_builders import DAY, NOW, WINDOW_NOW, disk, group, log, policy, plan_by_policy

from policies import ARCHIVED, DELETE, EXPIRED, KEEP, NOT_ARCHIVED, SIZE_CAP, trust_window, unarchived_may_go, up_window

URL = "s3://bucket/prod"
ARCHIVING = {"archive": {"url": URL}}


def archived(snapshot, *bases_index: int, at: float = NOW.timestamp() - DAY):
    """`snapshot` with the segments at these positions listed by the archive."""
    segments = tuple(replace(s, archived_at=at) if i in bases_index else s for i, s in enumerate(snapshot.segments))
    return replace(snapshot, segments=segments)


def test_local_retention_evicts_archived_segments_and_keeps_the_rest_as_not_archived():
    snapshot = archived(log([100, 90, 80, 70, 1], at=WINDOW_NOW), 0, 1)
    decided = plan_by_policy([snapshot], {"default": policy(**ARCHIVING)}, WINDOW_NOW).log("staging").decisions
    assert [d.action for d in decided] == [DELETE, DELETE, KEEP, KEEP, KEEP]
    assert decided[0].because == (EXPIRED, "time-window", ARCHIVED)
    assert "in the archive s3://bucket/prod since" in decided[0].explain()
    assert NOT_ARCHIVED in decided[2].reasons and "not in the archive s3://bucket/prod yet" in decided[2].explain()


def test_without_an_archive_nothing_changes_and_no_segment_is_called_archived():
    snapshot = archived(log([100, 90, 1], at=WINDOW_NOW), 0)
    decided = plan_by_policy([snapshot], {"default": policy()}, WINDOW_NOW).log("staging").decisions
    assert [d.action for d in decided] == [DELETE, DELETE, KEEP]
    assert all(ARCHIVED not in d.because and NOT_ARCHIVED not in d.reasons for d in decided)


def test_the_size_cap_evicts_archived_segments_only():
    snapshot = archived(log([5, 4, 3, 2, 1]), 0)
    decided = (plan_by_policy([snapshot], {"default": policy(retention_bytes="2000B", **ARCHIVING)}, NOW)
               .log("staging").decisions)
    assert [d.action for d in decided] == [DELETE, KEEP, KEEP, KEEP, KEEP]
    assert decided[0].because == (SIZE_CAP, ARCHIVED) and NOT_ARCHIVED in decided[1].reasons


def test_a_disk_force_takes_archived_segments_of_every_log_before_an_unarchived_one():
    # Two logs on one disk: the oldest segment is the unarchived one of `old`; evicting the archived
    # ones of `new` is enough, so `old` loses nothing.
    shared = disk(0.90, capacity=10_000)
    old = log([50, 1], name="old", disk_snapshot=shared)
    new = archived(log([40, 30, 20, 1], name="new", disk_snapshot=shared), 0, 1, 2)
    forcing = policy(disk={"force_target": 0.75}, **ARCHIVING)
    the_plan = plan_by_policy([old, new], {"default": forcing}, NOW)
    assert [d.action for d in the_plan.log("old").decisions] == [KEEP, KEEP]
    assert NOT_ARCHIVED in the_plan.log("old").decisions[0].reasons
    assert [d.action for d in the_plan.log("new").decisions] == [DELETE, DELETE, KEEP, KEEP]


def test_a_disk_force_that_archived_segments_cannot_satisfy_forces_unarchived_ones_too():
    shared = disk(0.96, capacity=10_000)   # 2,100 bytes over force_target: the archived 1,000 are not enough
    old = log([50, 40, 20, 1], name="old", disk_snapshot=shared)
    new = archived(log([30, 1], name="new", disk_snapshot=shared), 0)
    the_plan = plan_by_policy([old, new], {"default": policy(disk={"force_target": 0.75}, **ARCHIVING)}, NOW)
    old_decided = the_plan.log("old").decisions
    assert [d.action for d in old_decided] == [DELETE, DELETE, KEEP, KEEP]
    assert NOT_ARCHIVED in old_decided[0].overridden and old_decided[0].overridden_by == "disk-force"
    assert ARCHIVED not in old_decided[0].because
    assert [d.action for d in the_plan.log("new").decisions] == [DELETE, KEEP]   # taken first


def test_a_groups_unconsumed_records_keep_an_unarchived_segment_but_not_an_archived_one():
    snapshot = archived(log([100, 90, 80, 1], at=WINDOW_NOW, groups=[group("etl", 0)]), 0)
    decided = plan_by_policy([snapshot], {"default": policy(**ARCHIVING)}, WINDOW_NOW).log("staging").decisions
    assert [d.action for d in decided] == [DELETE, KEEP, KEEP, KEEP]
    assert decided[0].unconsumed[0].group == "etl" and "unconsumed:etl" not in decided[0].overridden
    assert "unconsumed:etl" in decided[1].reasons and NOT_ARCHIVED in decided[1].reasons


def _up(snapshot):
    return replace(snapshot, archive_up=True)


def test_a_disk_force_keeps_unarchived_segments_for_a_tier_that_is_up():
    # Below refuse_writes_ratio, with the tier up: the force uploads first (policies.archive_trust).
    snapshot = _up(log([50, 40, 20, 1], disk_snapshot=disk(0.90, capacity=10_000), groups=[group("etl", 0)]))
    decided = (plan_by_policy([snapshot], {"default": policy(disk={"force_target": 0.75}, **ARCHIVING)}, NOW)
               .log("staging").decisions)
    assert [d.action for d in decided] == [KEEP, KEEP, KEEP, KEEP]
    assert decided[0].reasons == (NOT_ARCHIVED,)      # its group's protection is overridden, not this


def test_at_refuse_writes_ratio_a_tier_that_did_not_keep_up_loses_unarchived_segments():
    snapshot = _up(log([50, 40, 20, 1], disk_snapshot=disk(0.97, capacity=10_000)))
    decided = (plan_by_policy([snapshot], {"default": policy(disk={"force_target": 0.75}, **ARCHIVING)}, NOW)
               .log("staging").decisions)
    assert decided[0].action == DELETE and decided[0].overridden_by == "disk-force"
    assert NOT_ARCHIVED in decided[0].overridden and ARCHIVED not in decided[0].because


def test_a_tier_is_trusted_for_three_upload_intervals_and_ten_seconds_at_least():
    assert trust_window(policy(archive={"url": URL, "interval": "30s"}).archive) == 90
    assert trust_window(policy(archive={"url": URL, "interval": "1s"}).archive) == 10
    assert up_window(policy(archive={"url": URL}).archive) == 3600          # lag_unhealthy
    assert not unarchived_may_go((), False)
    assert unarchived_may_go(("disk-force",), False) and not unarchived_may_go(("disk-force",), True)
    assert unarchived_may_go(("disk-force", "refuse-writes"), True)


def test_a_tier_not_trusted_now_is_named_in_the_keep():
    snapshot = replace(log([100, 1], at=WINDOW_NOW), archive_doubt="the tier shows no tier-identity.json")
    decided = plan_by_policy([snapshot], {"default": policy(**ARCHIVING)}, WINDOW_NOW).log("staging").decisions
    assert decided[0].action == KEEP and NOT_ARCHIVED in decided[0].reasons
    assert f"the archive {URL} is not trusted now (the tier shows no tier-identity.json)" in decided[0].explain()
