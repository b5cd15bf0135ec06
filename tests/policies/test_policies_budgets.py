"""Shared byte budgets, decided purely: the cross-log choice (`budget_picks`) and the planner's
budget step (`plan(..., budgets=...)`) on hand-made snapshots with a fixed clock (segments of
1,000 bytes unless said; the last is active)."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest
from plan_builders import NOW, group, log, policies, policy

from policies import (ACTIVE, ARCHIVED, BUDGET, DELETE, EXPIRED, KEEP, NO_TRIGGER, NOT_ARCHIVED, PREFIX, RESERVED,
                      BudgetCandidate, BudgetConfig, BudgetLog, budget_picks, plan, unconsumed)


def candidates(count: int, size: int = 1000, *, age: float = 1.0, archived: int = 0) -> tuple[BudgetCandidate, ...]:
    """``count`` deletable segments oldest first (ages falling from ``age`` + count), the first ``archived`` archived."""
    return tuple(BudgetCandidate(size, age + count - i, archived=i < archived) for i in range(count))


def given_up(picks) -> dict[str, int]:
    out: dict[str, int] = {}
    for pick in picks:
        out[pick.log] = out.get(pick.log, 0) + 1
    return out


# --- the choice ------------------------------------------------------------------------------------


def test_the_log_furthest_above_its_share_gives_up_first_until_the_total_fits():
    # Budget 8,000 with weights 2:1:1: shares 4,000, 2,000, 2,000. Sizes 4,500, 4,000, 2,000 = 10,500.
    logs = [BudgetLog("a", 4500, 4000, candidates(5)), BudgetLog("b", 4000, 2000, candidates(4)),
            BudgetLog("c", 2000, 2000, candidates(2))]
    picks = budget_picks(8000, logs)
    # b is 2,000 above its share, a 500: b gives up twice (down to its share), then a once, which
    # fits: 10,500 - 3,000 = 7,500 (within one segment).
    assert [p.log for p in picks] == ["b", "b", "a"]
    assert [p.index for p in picks] == [0, 1, 0]
    assert [(p.log_bytes, p.share, p.used) for p in picks] == [(4000, 2000, 10500), (3000, 2000, 9500),
                                                                (4500, 4000, 8500)]


def test_a_log_at_or_below_its_share_gives_up_nothing_even_when_the_budget_stays_over():
    # b is above its share but has nothing deletable: a (at its share) and c (below) keep theirs.
    logs = [BudgetLog("a", 4000, 4000, candidates(4)), BudgetLog("b", 6000, 2000, ()),
            BudgetLog("c", 1000, 2000, candidates(1))]
    assert budget_picks(8000, logs) == ()


def test_protected_segments_stop_a_log_and_the_next_furthest_gives_up_instead():
    # b has one deletable segment only (the rest protected): it gives it up, then a goes on.
    logs = [BudgetLog("a", 6000, 4000, candidates(6)), BudgetLog("b", 6000, 2000, candidates(1))]
    picks = budget_picks(8000, logs)
    assert given_up(picks) == {"b": 1, "a": 2}
    assert sum(1000 for _ in picks) == 3000 and 12000 - 3000 > 8000     # still over: nothing more can go


def test_ties_go_to_the_older_segment_then_to_the_log_named_first():
    older = [BudgetLog("a", 3000, 2000, candidates(3, age=1.0)), BudgetLog("b", 3000, 2000, candidates(3, age=5.0))]
    assert budget_picks(5000, older)[0].log == "b"
    same = [BudgetLog("a", 3000, 2000, candidates(3)), BudgetLog("b", 3000, 2000, candidates(3))]
    assert [p.log for p in budget_picks(4000, same)] == ["a", "b"]


def test_archived_segments_go_before_unarchived_ones_whoever_is_further_above():
    # a is far above its share but its next segment is not archived; b's first two are.
    logs = [BudgetLog("a", 9000, 2000, candidates(5)), BudgetLog("b", 3000, 2000, candidates(3, archived=2))]
    picks = budget_picks(8000, logs)
    assert [(p.log, p.index) for p in picks[:1]] == [("b", 0)]
    assert given_up(picks) == {"b": 1, "a": 3}     # b at its share after one: only a goes on


def test_floors_raise_a_share_and_shares_follow_the_weights():
    budget = BudgetConfig.model_validate({"bytes": 300, "logs": {"a": {"weight": 2}, "b": {}, "c": {"floor": 100}}})
    assert [budget.share(name) for name in "abc"] == [150, 75, 100]


def test_the_total_fits_within_one_segment_per_log_whatever_the_sizes():
    randomness = random.Random(39)
    for _ in range(300):
        count = randomness.randint(1, 5)
        shares = [randomness.randint(0, 5000) for _ in range(count)]
        logs = []
        for index, share in enumerate(shares):
            sizes = [randomness.randint(1, 900) for _ in range(randomness.randint(0, 20))]
            logs.append(BudgetLog(f"l{index}", sum(sizes) + randomness.randint(0, 500), share,
                                  tuple(BudgetCandidate(s, 100.0 - i) for i, s in enumerate(sizes))))
        budget = randomness.randint(1, 20000)
        picks = budget_picks(budget, logs)
        after = {log.name: log.size for log in logs}
        last: dict[str, int] = {}
        for pick in picks:
            assert pick.log_bytes > pick.share                           # only a log above its share gives up
            size = next(l for l in logs if l.name == pick.log).candidates[pick.index].bytes
            after[pick.log] -= size
            last[pick.log] = size
        for log in logs:
            if log.name in last:                                         # cut at most one segment below its share
                assert after[log.name] > log.share - last[log.name]
        total = sum(after.values())
        exhausted = all(after[l.name] <= l.share or given_up(picks).get(l.name, 0) == len(l.candidates)
                        for l in logs)
        assert total <= budget or exhausted                              # it fits unless nothing more may go
        if picks:
            assert picks[-1].used > budget                               # nothing goes once it fits


# --- the planner's budget step -----------------------------------------------------------------------

BUDGET_YAML = {"bytes": 8000, "logs": {"a": {"weight": 2}, "b": {}, "c": {}}}


def budget(**more) -> dict[str, BudgetConfig]:
    return {"shared": BudgetConfig.model_validate({**BUDGET_YAML, **more})}


def budget_plan(logs, *, budgets=None, by_name=None, now=NOW):
    by_name = by_name or policies(default=policy(files_per_pass=100))
    in_force = {one.name: by_name[one.policy] for one in logs}
    return plan(logs, in_force, now, {}, budgets=budget() if budgets is None else budgets)


def actions(log_plan) -> list[str]:
    return [decision.action for decision in log_plan.decisions]


def test_three_logs_two_to_one_to_one_young_segments_go_from_the_log_over_its_share():
    # 12,000 bytes in an 8,000 budget; shares 4,000 / 2,000 / 2,000. All segments young, no trigger.
    the_plan = budget_plan([log([1.0] * 4, name="a"), log([1.0] * 5, name="b"), log([1.0] * 3, name="c")])
    a, b, c = (the_plan.log(n) for n in "abc")
    assert all(BUDGET in lp.triggers for lp in (a, b, c))
    assert actions(b) == [DELETE] * 3 + [KEEP] * 2           # 5,000 -> 2,000: its share
    assert actions(c) == [DELETE] + [KEEP] * 2                # 3,000, 1,000 above: one
    assert actions(a) == [KEEP] * 4                            # at its share
    first = b.decisions[0]
    assert first.because == (BUDGET,) and first.overridden == (RESERVED,) and first.overridden_by == BUDGET
    assert first.details[BUDGET] == "log b: 4.9KiB, share 2.0KiB; budget shared 7.8KiB, 11.7KiB used"
    assert first.explain().startswith("b 00000000000000000000.log delete: budget (log b: 4.9KiB")
    assert b.decisions[3].reasons == (NO_TRIGGER, RESERVED)                # no prefix: what it named goes
    assert b.decisions[4].details[PREFIX] == f"{b.decisions[3].segment} is kept"


def test_under_the_budget_nothing_goes_and_no_trigger():
    the_plan = budget_plan([log([1.0] * 3, name="a"), log([1.0] * 3, name="b"), log([1.0] * 2, name="c")])
    assert all(BUDGET not in lp.triggers and DELETE not in actions(lp) for lp in the_plan.logs)


def test_a_segment_already_going_counts_and_an_expired_one_says_so():
    # b's two oldest segments are expired and the delete hour is now: they go by b's own rules; the
    # budget then takes only what is still over (10,000 of 8,000: one from b, one from c).
    by_name = policies(default=policy(files_per_pass=100, reserve="72h", delete_at_hours=[12]))
    the_plan = budget_plan([log([1.0] * 4, name="a"), log([100.0, 100.0, 1.0, 1.0, 1.0], name="b"),
                            log([1.0] * 3, name="c")], by_name=by_name)
    b, c = the_plan.log("b"), the_plan.log("c")
    assert actions(b) == [DELETE] * 3 + [KEEP] * 2
    assert b.decisions[0].because[0] == EXPIRED and BUDGET not in b.decisions[0].because     # its own rules
    assert b.decisions[2].because == (BUDGET,)                                               # 3,000 -> 2,000
    assert actions(c) == [DELETE, KEEP, KEEP]                                                # 12,000 - 4,000


def test_unconsumed_records_stay_protected_and_the_next_log_gives_up_instead():
    # b's group has consumed nothing: b gives up nothing; c (1,000 above) gives up one; still over.
    the_plan = budget_plan([log([1.0] * 4, name="a"), log([1.0] * 5, name="b", groups=[group("etl", 0)]),
                            log([1.0] * 3, name="c")])
    b, c = the_plan.log("b"), the_plan.log("c")
    assert actions(b) == [KEEP] * 5 and unconsumed("etl") in b.decisions[0].reasons
    assert actions(c) == [DELETE, KEEP, KEEP]
    assert actions(the_plan.log("a")) == [KEEP] * 4


def test_the_active_segment_is_never_given_up():
    the_plan = budget_plan([log([1.0], name="a", segment_bytes=9000)],
                           budgets={"shared": BudgetConfig.model_validate({"bytes": 1000, "logs": {"a": {}}})})
    assert actions(the_plan.log("a")) == [KEEP] and ACTIVE in the_plan.log("a").decisions[0].reasons


def test_files_per_pass_bounds_what_a_log_gives_up_in_one_pass():
    by_name = policies(default=policy(files_per_pass=2))
    the_plan = budget_plan([log([1.0] * 4, name="a"), log([1.0] * 8, name="b"), log([1.0] * 2, name="c")],
                           by_name=by_name)
    assert actions(the_plan.log("b")) == [DELETE, DELETE] + [KEEP] * 6


def test_with_an_archive_only_archived_segments_go_and_before_the_others():
    archive = {"archive": {"url": "file:///mnt/archive"}, "files_per_pass": 100}
    by_name = {"default": policy(files_per_pass=100), "tiered": policy(**archive)}
    a = log([1.0] * 5, name="a", policy_name="tiered")
    a = replace(a, segments=tuple(replace(s, archived_at=NOW.timestamp() - 60) if i < 2 else s
                                  for i, s in enumerate(a.segments)))
    # a is 1,000 above its share 4,000 only, b 2,000 above: yet a's archived segment goes first.
    the_plan = budget_plan([a, log([1.0] * 4, name="b"), log([1.0] * 2, name="c")], by_name=by_name)
    a_plan, b_plan = the_plan.log("a"), the_plan.log("b")
    assert actions(a_plan) == [DELETE] + [KEEP] * 4
    assert a_plan.decisions[0].because == (BUDGET, ARCHIVED)
    assert NOT_ARCHIVED in a_plan.decisions[2].reasons
    assert actions(b_plan) == [DELETE, DELETE, KEEP, KEEP]     # 11,000 -> 8,000


def test_logs_of_a_budget_absent_from_the_plan_count_for_nothing():
    # b alone: 9,000 bytes against 8,000, above its share 2,000: one segment fits it.
    the_plan = budget_plan([log([1.0] * 9, name="b")])
    assert actions(the_plan.log("b")) == [DELETE] + [KEEP] * 8


@pytest.mark.parametrize("order", list(itertools.permutations("abc")))
def test_the_decision_does_not_depend_on_the_order_the_logs_come_in(order):
    logs = {"a": log([1.0] * 4, name="a"), "b": log([1.0] * 5, name="b"), "c": log([1.0] * 3, name="c")}
    the_plan = budget_plan([logs[n] for n in order])
    assert [len(the_plan.log(n).to_delete) for n in "abc"] == [0, 3, 1]
