"""retention_bytes: the size-cap trigger, rule by rule, with an injected clock and hand-made
snapshots (segments of 1,000 bytes; the last is active)."""

from __future__ import annotations

import pytest
from plan_builders import NOW, WINDOW_NOW, group, log, policies, policy, plan_by_policy

from policies import (ACTIVE, BATCH_LIMIT, DELETE, KEEP, NO_TRIGGER, PREFIX, RESERVED, SIZE_CAP, TIME_WINDOW,
                      ConfigError, parse_config, unconsumed)


def capped(cap: int, **more: object):
    return policies(default=policy(retention_bytes=cap, files_per_pass=100, **more))


def actions(log_plan) -> list[str]:
    return [decision.action for decision in log_plan.decisions]


def test_a_log_over_its_cap_loses_its_oldest_segments_down_to_the_cap_whatever_their_age():
    # 10 segments of 1,000 bytes, all young (reserve 72h by default), a cap of 6,500 bytes.
    the_plan = plan_by_policy([log([1.0] * 10)], capped(6500), NOW)
    staging = the_plan.log("staging")
    assert SIZE_CAP in staging.triggers
    assert actions(staging) == [DELETE] * 4 + [KEEP] * 6            # 10,000 -> 6,000 <= 6,500
    first = staging.decisions[0]
    assert first.overridden == (RESERVED,) and first.overridden_by == SIZE_CAP
    assert first.details[SIZE_CAP] == "size 9.8KiB > retention_bytes 6.3KiB"
    assert staging.decisions[4].reasons == (NO_TRIGGER, RESERVED)    # within the cap: nothing justifies it
    assert "within retention_bytes 6.3KiB" in staging.decisions[4].details[NO_TRIGGER]


def test_exactly_at_the_cap_nothing_goes():
    assert SIZE_CAP not in plan_by_policy([log([1.0] * 5)], capped(5000), NOW).log("staging").triggers
    assert actions(plan_by_policy([log([1.0] * 5)], capped(5000), NOW).log("staging")) == [KEEP] * 5


def test_a_cap_smaller_than_one_segment_keeps_only_the_active_segment():
    staging = plan_by_policy([log([1.0] * 4)], capped(10), NOW).log("staging")
    assert actions(staging) == [DELETE, DELETE, DELETE, KEEP]
    assert ACTIVE in staging.decisions[-1].reasons


def test_an_active_segment_bigger_than_the_cap_is_kept_and_so_is_nothing_else():
    staging = plan_by_policy([log([1.0], segment_bytes=4000)], capped(1000), NOW).log("staging")
    assert SIZE_CAP in staging.triggers and actions(staging) == [KEEP]
    assert staging.decisions[0].reasons == (ACTIVE,)


def test_unconsumed_segments_stay_protected_and_stop_the_walk():
    staging = plan_by_policy([log([1.0] * 8, groups=[group("etl", 200)])], capped(3000), NOW).log("staging")
    # etl consumed offsets below 200: segments 0 and 1 go; segment 2 is etl's, and the rest wait.
    assert actions(staging)[:3] == [DELETE, DELETE, KEEP]
    assert unconsumed("etl") in staging.decisions[2].reasons
    assert PREFIX in staging.decisions[3].reasons


def test_files_per_pass_still_bounds_a_pass():
    staging = plan_by_policy([log([1.0] * 10)], policies(default=policy(retention_bytes=2000, files_per_pass=3)), NOW)
    decisions = staging.log("staging").decisions
    assert actions(staging.log("staging")) == [DELETE] * 3 + [KEEP] * 7
    assert BATCH_LIMIT in decisions[3].reasons


def test_in_the_delete_window_the_cap_and_reserve_act_independently():
    # Expired segments go in the window as ever; young ones go too while the log is over its cap.
    ages = [100.0, 100.0, 1.0, 1.0, 1.0, 1.0]
    staging = plan_by_policy([log(ages, at=WINDOW_NOW)], capped(3000), WINDOW_NOW).log("staging")
    assert {TIME_WINDOW, SIZE_CAP} <= set(staging.triggers)
    assert actions(staging) == [DELETE, DELETE, DELETE, KEEP, KEEP, KEEP]
    assert staging.decisions[2].overridden_by == SIZE_CAP
    assert staging.decisions[3].reasons == (RESERVED,)          # at the cap now: reserve keeps it


def test_retention_bytes_is_a_positive_size_or_null():
    base = "logs: {a: {path: /tmp/x}}\npolicies:\n  default:\n    retention_bytes: "
    assert parse_config(base + "2GiB\n").policies["default"].retention_bytes == 2 << 30
    assert parse_config(base + "null\n").policies["default"].retention_bytes is None
    for bad in ("0", "-1", "lots"):
        with pytest.raises(ConfigError, match="retention_bytes"):
            parse_config(base + bad + "\n")
