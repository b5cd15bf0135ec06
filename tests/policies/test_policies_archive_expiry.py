"""Total retention of the archive tier: by time and size, oldest first without holes, never what
the local disk still holds, never what a live consumer group has not consumed."""

from __future__ import annotations

from plan_builders import DAY, NOW_TS, group, policy

from policies import (LOCAL, TOTAL_RESERVE, TOTAL_RETENTION, TOTAL_SIZE, ArchivedSegmentSnapshot,
                      expire_archived)


def archived(*ages_days: float, size: int = 100) -> list[ArchivedSegmentSnapshot]:
    return [ArchivedSegmentSnapshot(i * 10, i * 10 + 10, size, NOW_TS - age * DAY) for i, age in enumerate(ages_days)]


def decide(segments, *, local_start=1000, groups=(), **archive):
    return expire_archived(segments, local_start=local_start, groups=list(groups), now=NOW_TS,
                           policy=policy(archive={"url": "file:///a", **archive}))


def test_segments_past_the_total_reserve_go_oldest_first_and_the_first_younger_one_stops_it():
    expiry = decide(archived(40, 35, 20, 31), reserve="30d")
    assert [(s.base_offset, why) for s, why in expiry.expired] == [(0, TOTAL_RESERVE), (10, TOTAL_RESERVE)]
    assert expiry.kept_because == TOTAL_RETENTION        # 31 days old behind it waits: no hole


def test_the_size_cap_takes_the_oldest_until_the_archive_fits():
    expiry = decide(archived(4, 3, 2, 1), retention_bytes="250B")
    assert [(s.base_offset, why) for s, why in expiry.expired] == [(0, TOTAL_SIZE), (10, TOTAL_SIZE)]


def test_nothing_goes_without_a_total_retention_nor_while_the_disk_still_holds_it():
    assert decide(archived(400, 300)).expired == ()
    expiry = decide(archived(40, 35), local_start=10, reserve="30d")
    assert [s.base_offset for s, _ in expiry.expired] == [0] and expiry.kept_because == LOCAL


def test_a_live_group_protects_what_it_has_not_consumed_and_a_stale_one_nothing():
    live = decide(archived(40, 35), reserve="30d", groups=[group("etl", 5)])
    assert live.expired == () and live.kept_because == "unconsumed:etl"
    stale = decide(archived(40, 35), reserve="30d", groups=[group("etl", 5, idle_hours=24 * 8)])
    assert len(stale.expired) == 2 and stale.kept_because is None
