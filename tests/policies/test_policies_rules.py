"""Each of the planner's rules (policies.rules) alone, on a segment and a hand-made context; their
documented order; and how much of a log a pass reads (policies.segments_to_examine)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from plan_builders import HOUR, NOW, NOW_TS, disk, hung, log, policy

import policies.rules
from policies import (ACTIVE, BATCH_LIMIT, CLOCK_STEP, DISK_FORCE, HELD, MANUAL, NO_MANUAL_TRIGGER, NO_TRIGGER,
                      NOT_ARCHIVED, PREFIX, REFUSE_WRITES, RESERVED, SIZE_CAP, TIME_WINDOW, ManualTrigger,
                      UnconsumedRange, log_triggers, segments_to_examine, unconsumed)
from policies.rules import (FORCED, KEEPS, OVERRIDDEN, RETRIED, RULES, Context, active, apply_rules, batch_limit,
                            held, no_trigger, not_archived, prefix, unconsumed_by, young)

URL = "s3://bucket/prod"
SNAPSHOT = log([100, 50, 1])
OLD, MIDDLE, LAST = SNAPSHOT.segments


def context(**changes) -> Context:
    """The walk at the oldest segment of ``SNAPSHOT`` (100 h old), a delete hour active, nothing forcing."""
    fields = dict(policy=policy(), log=SNAPSHOT, triggers=(TIME_WINDOW,), now=NOW_TS, wall=NOW_TS,
                  protecting=frozenset(), is_last=False, age=100 * HOUR, ranges=(), forcing=None, over_cap=False,
                  overridden_by=None, left_bytes=3000, first_kept=None, deleted=0)
    return Context(**{**fields, **changes})


def words(found) -> str:
    return found.detail[0](*found.detail[1:])


# --- one rule at a time ----------------------------------------------------------------------------


def test_active_keeps_the_segment_flagged_active_and_a_last_one_not_sealed():
    assert [f.code for f in active(LAST, context(is_last=True))] == [ACTIVE]
    assert [f.code for f in active(replace(LAST, active=False), context(is_last=True))] == [ACTIVE]
    assert active(replace(LAST, active=False, sealed=True), context(is_last=True)) == ()
    assert active(OLD, context()) == ()


def test_no_trigger_keeps_without_a_trigger_or_with_a_size_cap_already_met():
    [found] = no_trigger(OLD, context(triggers=()))
    assert (found.code, found.effect) == (NO_TRIGGER, KEEPS)
    assert "disk 50.0% used" in words(found)
    assert [f.code for f in no_trigger(OLD, context(triggers=(SIZE_CAP,), over_cap=False))] == [NO_TRIGGER]
    assert no_trigger(OLD, context(triggers=(SIZE_CAP,), over_cap=True)) == ()
    assert no_trigger(OLD, context(triggers=(TIME_WINDOW,))) == ()


def test_young_keeps_a_segment_younger_than_reserve_unless_something_forces():
    [found] = young(MIDDLE, context(age=50 * HOUR))
    assert (found.code, found.effect) == (RESERVED, KEEPS)
    assert words(found) == "younger than 3d, 2d2h old"
    [forced] = young(MIDDLE, context(age=50 * HOUR, overridden_by=SIZE_CAP))
    assert (forced.code, forced.effect) == (RESERVED, OVERRIDDEN)
    assert young(OLD, context()) == ()


def test_young_names_a_segment_expired_only_by_a_clock_step():
    stepped = context(now=NOW_TS - 60 * HOUR, age=40 * HOUR)     # 100 h old by the wall clock, 40 h by trust
    [found] = young(OLD, stepped)
    assert (found.code, found.effect) == (CLOCK_STEP, KEEPS)
    assert words(found).startswith("the wall clock is 2d12h ahead of the trusted time, 1d16h old by it")


def test_not_archived_keeps_what_the_tier_does_not_hold_unless_a_force_cannot_wait_for_it():
    archiving = policy(archive={"url": URL})
    [found] = not_archived(OLD, context(policy=archiving))
    assert (found.code, found.effect) == (NOT_ARCHIVED, KEEPS) and URL in words(found)
    down = context(policy=archiving, triggers=(DISK_FORCE,), forcing=DISK_FORCE)
    assert [f.effect for f in not_archived(OLD, down)] == [OVERRIDDEN]
    up = context(policy=archiving, triggers=(DISK_FORCE,), forcing=DISK_FORCE, log=replace(SNAPSHOT, archive_up=True))
    assert [f.effect for f in not_archived(OLD, up)] == [KEEPS]
    refused = context(policy=archiving, triggers=(DISK_FORCE, REFUSE_WRITES), forcing=DISK_FORCE,
                      log=replace(SNAPSHOT, archive_up=True))
    assert [f.effect for f in not_archived(OLD, refused)] == [OVERRIDDEN]
    assert not_archived(replace(OLD, archived_at=NOW_TS), context(policy=archiving)) == ()
    assert not_archived(OLD, context()) == ()


def test_unconsumed_keeps_for_each_protecting_group_and_gives_way_to_a_disk_force():
    ranges = (UnconsumedRange("etl", 40, 100), UnconsumedRange("old", 0, 100))
    found = unconsumed_by(OLD, context(ranges=ranges, protecting=frozenset({"etl"})))
    assert [(f.code, f.effect) for f in found] == [(unconsumed("etl"), KEEPS)]
    assert words(found[0]) == "etl has not consumed offsets 40 to 99"
    forcing = context(ranges=ranges, protecting=frozenset({"etl", "old"}), forcing=DISK_FORCE)
    assert [(f.code, f.effect) for f in unconsumed_by(OLD, forcing)] == [
        (unconsumed("etl"), OVERRIDDEN), (unconsumed("old"), OVERRIDDEN)]
    archived = context(ranges=ranges, protecting=frozenset({"etl"}), policy=policy(archive={"url": URL}))
    assert unconsumed_by(replace(OLD, archived_at=NOW_TS), archived) == ()
    assert unconsumed_by(OLD, context(ranges=ranges)) == ()


@pytest.mark.parametrize(("first", "last", "effect", "said"), [
    (60, 30, KEEPS, "held for 1m, next attempt in 1m30s"),
    (300, 150, RETRIED, "held for 5m, last attempt 2m30s ago"),
    (700, 10, FORCED, "held for 11m40s, past force_after 10m"),
])
def test_held_waits_retries_then_forces(first, last, effect, said):
    holding = context(log=replace(SNAPSHOT, hung={OLD.base_offset: hung(first, last)}),
                      policy=policy(hung={"retry_every": "2m", "force_after": "10m"}))
    [found] = held(OLD, holding)
    assert (found.code, found.effect, words(found)) == (HELD, effect, said)
    assert held(MIDDLE, holding) == ()


def test_prefix_keeps_everything_after_a_kept_segment():
    [found] = prefix(MIDDLE, context(first_kept=OLD.name))
    assert (found.code, words(found)) == (PREFIX, f"{OLD.name} is kept")
    assert prefix(MIDDLE, context()) == ()


def test_batch_limit_keeps_once_files_per_pass_deletions_are_planned():
    assert batch_limit(OLD, context(deleted=9)) == ()
    [found] = batch_limit(OLD, context(deleted=10))
    assert (found.code, words(found)) == (BATCH_LIMIT, "10 deletions already planned")


def test_every_rule_finds_nothing_in_a_segment_free_to_go():
    assert [rule(OLD, context()) for rule in RULES] == [()] * len(RULES)


# --- the order --------------------------------------------------------------------------------------

CODES = {active: [ACTIVE], no_trigger: [NO_TRIGGER], young: [RESERVED, CLOCK_STEP], not_archived: [NOT_ARCHIVED],
         unconsumed_by: ["unconsumed:GROUP"], held: [HELD], prefix: [PREFIX], batch_limit: [BATCH_LIMIT]}


def test_the_rules_module_and_the_concepts_page_state_the_order_the_rules_are_applied_in():
    applied = [code for rule in RULES for code in CODES[rule]]
    docstring = policies.rules.__doc__.split("\n\n")[1]
    assert re.findall(r"``([a-zA-Z:-]+)``", docstring) == applied
    concepts = (Path(__file__).resolve().parents[2] / "docs" / "concepts.md").read_text()
    section = concepts.split("### The rules, in order")[1].split("\n### ")[0]
    assert re.findall(r"^\d\. \*\*`([a-zA-Z:-]+)`\*\*(?: / \*\*`([a-zA-Z-]+)`\*\*)?", section, re.M) == [
        ("active", ""), ("no-trigger", ""), ("reserved", "clock-step"), ("not-archived", ""),
        ("unconsumed:GROUP", ""), ("held", ""), ("prefix", ""), ("batch-limit", "")]


def test_applying_the_rules_lists_a_kept_segments_reasons_in_rule_order():
    crowded = context(triggers=(), age=HOUR, ranges=(UnconsumedRange("etl", 0, 100),),
                      protecting=frozenset({"etl"}), first_kept="x", deleted=10, is_last=True,
                      policy=policy(archive={"url": URL}))
    verdict = apply_rules(LAST, crowded)
    assert verdict.reasons == (ACTIVE, NO_TRIGGER, RESERVED, NOT_ARCHIVED, unconsumed("etl"), PREFIX, BATCH_LIMIT)
    assert list(verdict.details) == list(verdict.reasons) and verdict.overridden == () and verdict.hold is None


def test_applying_the_rules_sorts_what_a_force_overrides_from_a_hold_it_retries():
    holding = replace(SNAPSHOT, hung={MIDDLE.base_offset: hung(300, 150)})
    forced = context(age=50 * HOUR, forcing=DISK_FORCE, overridden_by=DISK_FORCE, protecting=frozenset({"etl"}),
                     ranges=(UnconsumedRange("etl", 100, 200),), log=holding,
                     policy=policy(hung={"force_after": "10m"}))
    verdict = apply_rules(MIDDLE, forced)
    assert verdict.reasons == () and verdict.overridden == (RESERVED, unconsumed("etl"))
    assert verdict.hold == RETRIED and list(verdict.details) == [RESERVED, unconsumed("etl"), HELD]


# --- how much of a log a pass reads ---------------------------------------------------------------


def test_a_pass_reads_the_head_alone_without_a_trigger_and_a_batch_with_one():
    assert segments_to_examine(policy(), disk(0.5), NOW, NO_MANUAL_TRIGGER) == 1
    assert segments_to_examine(policy(files_per_pass=7), disk(0.5), NOW, ManualTrigger.open(1)) == 8
    assert segments_to_examine(policy(files_per_pass=7), disk(0.97), NOW, NO_MANUAL_TRIGGER) == 8


def test_a_pass_reads_a_capped_log_whole():
    assert segments_to_examine(policy(retention_bytes="1MiB"), disk(0.5), NOW, NO_MANUAL_TRIGGER) is None


def test_log_triggers_add_the_size_cap_in_contract_order():
    capped = policy(retention_bytes="2000B")
    assert log_triggers(capped, disk(0.5), NOW, ManualTrigger.open(1), 2000) == (MANUAL,)
    assert log_triggers(capped, disk(0.5), NOW, ManualTrigger.open(1), 2001) == (MANUAL, SIZE_CAP)
    assert log_triggers(policy(), disk(0.5), NOW, NO_MANUAL_TRIGGER, 10**9) == ()

