"""The liveness rule: marks, superseded keys, tombstones against time and group progress, pending jobs."""

from __future__ import annotations

import random
from datetime import datetime, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies import (
    CAUSES,
    DEAD,
    SUPERSEDED,
    TOMBSTONE,
    CompactionConfig,
    KeyIndex,
    LivenessRule,
    PendingRanges,
    PolicyConfig,
    count_dropped,
)

NOW = datetime(2026, 1, 10, 12, 0, tzinfo=timezone.utc)
NOW_TS = NOW.timestamp()
HOUR = 3600.0


def compaction(**settings_: object) -> CompactionConfig:
    """A compaction block built from YAML-style values, as an operator writes them."""
    return CompactionConfig.model_validate(settings_)


KEYED = compaction(keys=True, tombstone_retention="1h")
UNKEYED = compaction(tombstone_retention="1h")


def keyed_rule(**context: object) -> LivenessRule:
    return LivenessRule(KEYED, NOW, **context)


# --- the configuration block ---------------------------------------------------------------------------


def test_compaction_defaults_are_the_design_contract():
    config = PolicyConfig().compaction
    assert config == compaction(
        enabled=True,
        interval="5m",
        max_live_ratio=0.5,
        keys=False,
        tombstone_retention="24h",
        min_age="0s",
        merge=True,
        max_bytes_per_second="64MiB",
        max_pass_duration="60s",
    )
    assert (config.interval, config.tombstone_retention, config.min_age, config.max_pass_duration) == (300.0, 86400.0, 0.0, 60.0)
    assert config.max_bytes_per_second == 64 * 2**20
    assert all(field.description for field in CompactionConfig.model_fields.values())


@pytest.mark.parametrize(("value", "accepted"), [(1, True), ("100%", True), (0.0001, True), (0, False), ("0%", False), (1.01, False)])
def test_max_live_ratio_is_above_zero_and_at_most_one(value, accepted):
    if accepted:
        assert 0 < compaction(max_live_ratio=value).max_live_ratio <= 1
    else:
        with pytest.raises(ValueError, match="max_live_ratio"):
            compaction(max_live_ratio=value)


def test_compaction_block_dumps_in_units_and_reads_back():
    config = compaction(keys=True, tombstone_retention="90m", max_bytes_per_second="8MiB")
    dumped = config.model_dump(mode="json")
    assert (dumped["tombstone_retention"], dumped["max_bytes_per_second"]) == ("90m", "8MiB")
    assert CompactionConfig.model_validate(dumped) == config


# --- marks and unkeyed logs ----------------------------------------------------------------------------


def test_unkeyed_log_drops_only_marked_records():
    rule = LivenessRule(UNKEYED, NOW, newest={b"k": 9}, committed={"etl": 100})
    assert rule.cause(1, b"k", False, False) is None  # a later record of its key supersedes nothing here
    assert rule.cause(2, b"k", True, False) is None  # an empty value is just a value
    assert rule.cause(3, None, False, True) == DEAD
    assert rule.cause(4, b"k", True, True) == DEAD


def test_a_mark_names_the_cause_even_when_the_record_is_also_superseded_or_an_old_tombstone():
    rule = keyed_rule(newest={b"k": 9}, tombstones_first_seen={5: NOW_TS - 2 * HOUR})
    assert rule.cause(1, b"k", False, True) == DEAD
    assert rule.cause(9, b"k", True, True) == DEAD


# --- pending Spark jobs --------------------------------------------------------------------------------


@pytest.mark.parametrize(("offset", "pending"), [(9, False), (10, True), (14, True), (15, False)])
def test_pending_range_keeps_marked_superseded_and_expired_records(offset, pending):
    rule = keyed_rule(
        newest={b"k": 100}, tombstones_first_seen={offset: NOW_TS - 2 * HOUR}, pending=[(10, 15)]
    )
    expected_when_settled = {"marked": DEAD, "superseded": SUPERSEDED}
    causes = {"marked": rule.cause(offset, b"x", False, True), "superseded": rule.cause(offset, b"k", True, False)}
    assert causes == ({"marked": None, "superseded": None} if pending else expected_when_settled)


def test_pending_ranges_merge_and_ignore_empty_ones():
    ranges = PendingRanges([(20, 30), (0, 5), (5, 8), (25, 40), (50, 50)])
    assert list(ranges) == [(0, 8), (20, 40)]
    assert len(ranges) == 2
    assert [offset for offset in range(60) if offset in ranges] == [*range(0, 8), *range(20, 40)]
    assert 50 not in ranges


@pytest.mark.parametrize("bad", [(5, 4), (-1, 3), (True, 3), (1.0, 3)])
def test_pending_ranges_reject_impossible_ranges(bad):
    with pytest.raises(ValueError, match="a pending range must be two offsets"):
        PendingRanges([bad])


# --- superseded keys -----------------------------------------------------------------------------------


def test_keyed_log_keeps_only_the_newest_record_of_each_key():
    rule = keyed_rule(newest={b"a": 7, b"b": 3})
    assert rule.cause(1, b"a", False, False) == SUPERSEDED
    assert rule.cause(6, b"a", False, False) == SUPERSEDED
    assert rule.cause(7, b"a", False, False) is None
    assert rule.cause(3, b"b", False, False) is None
    assert rule.cause(8, b"a", False, False) is None  # later than the index saw: never superseded
    assert rule.cause(2, b"c", False, False) is None  # a key the index does not know


def test_records_without_a_key_are_never_superseded_nor_tombstones():
    rule = keyed_rule(newest={b"a": 7}, tombstones_first_seen={1: NOW_TS - 10 * HOUR})
    assert rule.cause(1, None, False, False) is None
    assert rule.cause(1, None, True, False) is None


def test_a_superseded_tombstone_goes_at_once_whatever_retention_and_groups():
    rule = keyed_rule(newest={b"k": 9}, committed={"etl": 0})
    assert rule.cause(4, b"k", True, False) == SUPERSEDED


# --- tombstones: time and group progress ---------------------------------------------------------------


@pytest.mark.parametrize(("seen_ago", "cause"), [(HOUR, TOMBSTONE), (HOUR - 0.001, None), (10 * HOUR, TOMBSTONE), (0.0, None)])
def test_tombstone_is_kept_for_its_retention_after_first_seen(seen_ago, cause):
    rule = keyed_rule(newest={b"k": 5}, tombstones_first_seen={5: NOW_TS - seen_ago})
    assert rule.cause(5, b"k", True, False) == cause


def test_a_tombstone_never_seen_is_first_seen_now():
    rule = keyed_rule(newest={b"k": 5}, tombstones_first_seen={6: NOW_TS - 5 * HOUR})
    assert rule.cause(5, b"k", True, False) is None
    assert rule.first_seen(5) == NOW_TS
    assert rule.first_seen(6) == NOW_TS - 5 * HOUR


def test_zero_retention_drops_a_consumed_tombstone_at_first_sight():
    rule = LivenessRule(compaction(keys=True, tombstone_retention="0s"), NOW, newest={b"k": 5}, committed={"etl": 6})
    assert rule.cause(5, b"k", True, False) == TOMBSTONE


@pytest.mark.parametrize(
    ("committed", "stale", "cause"),
    [
        ({"etl": 5}, (), None),  # committed exactly at the tombstone: it has not consumed it
        ({"etl": 6}, (), TOMBSTONE),  # committed past it
        ({"etl": 6, "audit": 5}, (), None),  # every live group must be past it
        ({"etl": 6, "audit": 0}, ("audit",), TOMBSTONE),  # a stale group protects nothing
        ({"etl": 3}, ("etl",), TOMBSTONE),  # no live group left
        ({}, (), TOMBSTONE),  # no consumer group at all
        ({"etl": 6}, ("ghost",), TOMBSTONE),  # a stale name without an offset changes nothing
    ],
)
def test_an_expired_tombstone_waits_for_every_group_that_is_not_stale(committed, stale, cause):
    rule = keyed_rule(newest={b"k": 5}, tombstones_first_seen={5: NOW_TS - 2 * HOUR}, committed=committed, stale_groups=stale)
    assert rule.cause(5, b"k", True, False) == cause


def test_the_rule_needs_an_aware_time():
    with pytest.raises(ValueError, match="aware"):
        LivenessRule(KEYED, datetime(2026, 1, 10, 12, 0))


# --- the key index -------------------------------------------------------------------------------------


def test_key_index_skips_keyless_marked_and_pending_records():
    index = KeyIndex(pending=[(8, 10)])
    for offset, key, marked in [(0, b"a", False), (1, None, False), (2, b"a", False), (3, b"b", False), (4, b"a", True), (8, b"b", False)]:
        index.note(offset, key, marked)
    assert dict(index.newest) == {b"a": 2, b"b": 3}
    with pytest.raises(TypeError):
        index.newest[b"c"] = 1  # type: ignore[index]


def test_a_marked_newest_record_does_not_bury_the_value_before_it():
    records = [(0, b"k", False, False), (1, b"k", False, True)]  # the second write was an aborted job's
    index = KeyIndex()
    for offset, key, _, marked in records:
        index.note(offset, key, marked)
    rule = keyed_rule(newest=index.newest)
    assert [rule.cause(*record) for record in records] == [None, DEAD]


def test_a_pending_newer_record_does_not_bury_the_settled_value():
    records = [(0, b"k", False, False), (1, b"k", False, False)]
    index = KeyIndex(pending=[(1, 2)])
    for offset, key, _, marked in records:
        index.note(offset, key, marked)
    rule = keyed_rule(newest=index.newest, pending=[(1, 2)])
    assert [rule.cause(*record) for record in records] == [None, None]


# --- counts for the audit ------------------------------------------------------------------------------


def test_count_dropped_counts_every_cause_in_contract_order():
    assert count_dropped([None, DEAD, SUPERSEDED, SUPERSEDED, None, TOMBSTONE]) == {DEAD: 1, SUPERSEDED: 2, TOMBSTONE: 1}
    assert list(count_dropped(())) == list(CAUSES) == ["dead", "superseded", "tombstone"]
    assert count_dropped(()) == {"dead": 0, "superseded": 0, "tombstone": 0}
    with pytest.raises(ValueError, match="unknown cause 'expired'"):
        count_dropped(["expired"])


# --- properties ----------------------------------------------------------------------------------------

KEYS = st.sampled_from([None, b"a", b"b", b"c"])


@st.composite
def logs(draw):
    """Records (offset, key, tombstone, marked) at offsets 0..n-1 plus the per-log context."""
    records = [(offset, draw(KEYS), draw(st.booleans()), draw(st.booleans())) for offset in range(draw(st.integers(0, 30)))]
    pending = draw(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 6)).map(lambda p: (p[0], p[0] + p[1])), max_size=3))
    first_seen = {offset: NOW_TS - draw(st.sampled_from([0.0, HOUR - 1, HOUR, 5 * HOUR])) for offset, _, tomb, _ in records if tomb and draw(st.booleans())}
    committed = draw(st.dictionaries(st.sampled_from(["etl", "audit", "spark"]), st.integers(0, 32), max_size=3))
    stale = draw(st.sets(st.sampled_from(["etl", "audit", "spark"]), max_size=2))
    return records, pending, first_seen, committed, stale


def naive_cause(records, offset, key, tombstone, marked, pending, first_seen, committed, stale):
    """The rule as the issue words it, computed from scratch for one record."""
    def in_pending(at):
        return any(start <= at < end for start, end in pending)

    if in_pending(offset):
        return None
    if marked:
        return DEAD
    if key is None:
        return None
    if any(later > offset and k == key and not m and not in_pending(later) for later, k, _, m in records):
        return SUPERSEDED
    if tombstone:
        old_enough = NOW_TS - first_seen.get(offset, NOW_TS) >= HOUR
        consumed = all(position > offset for group, position in committed.items() if group not in stale)
        if old_enough and consumed:
            return TOMBSTONE
    return None


@settings(max_examples=300, deadline=None)
@given(logs(), st.randoms(use_true_random=False))
def test_rule_equals_the_naive_wording_and_ignores_the_order_records_are_indexed(log, shuffler: random.Random):
    records, pending, first_seen, committed, stale = log
    index = KeyIndex(pending)
    for offset, key, _, marked in shuffler.sample(records, len(records)):
        index.note(offset, key, marked)
    rule = keyed_rule(newest=index.newest, tombstones_first_seen=first_seen, committed=committed, stale_groups=stale, pending=pending)
    for record in records:
        assert rule.cause(*record) == naive_cause(records, *record, pending, first_seen, committed, stale)


@settings(max_examples=300, deadline=None)
@given(logs())
def test_each_key_keeps_exactly_its_newest_settled_record_unless_that_is_a_dropped_tombstone(log):
    records, pending, first_seen, committed, stale = log
    ranges = PendingRanges(pending)
    index = KeyIndex(ranges)
    for offset, key, _, marked in records:
        index.note(offset, key, marked)
    rule = keyed_rule(newest=index.newest, tombstones_first_seen=first_seen, committed=committed, stale_groups=stale, pending=ranges)
    for key in {key for _, key, _, _ in records if key is not None}:
        settled = [record for record in records if record[1] == key and not record[3] and record[0] not in ranges]
        live = [record for record in settled if rule.cause(*record) is None]
        if settled and not settled[-1][2]:
            assert live == [settled[-1]]
        else:
            assert live in ([], settled[-1:])
    for record in records:
        if record[0] in ranges:
            assert rule.cause(*record) is None
        elif record[3]:
            assert rule.cause(*record) == DEAD
        if record[1] is None:
            assert rule.cause(*record) in (None, DEAD)


@settings(max_examples=200, deadline=None)
@given(logs())
def test_an_unkeyed_log_drops_exactly_the_marked_records_outside_pending_ranges(log):
    records, pending, first_seen, committed, stale = log
    index = KeyIndex(pending)
    for offset, key, _, marked in records:
        index.note(offset, key, marked)
    rule = LivenessRule(UNKEYED, NOW, newest=index.newest, tombstones_first_seen=first_seen, committed=committed, stale_groups=stale, pending=pending)
    ranges = PendingRanges(pending)
    causes = [rule.cause(*record) for record in records]
    assert causes == [DEAD if marked and offset not in ranges else None for offset, _, _, marked in records]
    assert count_dropped(causes)[DEAD] == causes.count(DEAD)
