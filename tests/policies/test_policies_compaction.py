"""Choosing segments to compact: candidates, order, merging, room, throttle and the pressure rule."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies import (
    ACTIVE,
    ARCHIVED_SEGMENT,
    COMPACTION_REASONS,
    DISABLED,
    LIVE_RATIO,
    NO_ROOM,
    YOUNG,
    CompactionConfig,
    CompactionSegment,
    DiskConfig,
    plan_compaction,
    pressure_calls_for_compaction,
    should_compact_under_pressure,
    throttle_delay,
    too_live_to_compact,
    within_pass_budget,
)

NOW = datetime(2026, 1, 10, 12, 0, tzinfo=timezone.utc)
NOW_MS = int(NOW.timestamp() * 1000)
SIZE = 1000  # segment_size of every test log
DAY = 86400.0
PLENTY = 10**9  # free bytes that never limit


def compaction(**settings_: object) -> CompactionConfig:
    return CompactionConfig.model_validate(settings_)


DEFAULT = compaction()
ANY_DEAD = compaction(max_live_ratio=1)  # every segment with a dead byte is a candidate


def segment(index: int, live: int, *, used: int = SIZE, size: int = SIZE, age: float = DAY, active: bool = False) -> CompactionSegment:
    last_ms = NOW_MS - round(age * 1000)
    return CompactionSegment(
        base_offset=index * 100,
        end_offset=index * 100 + 100,
        size_bytes=size,
        used_bytes=used,
        live_bytes=live,
        first_timestamp_ms=last_ms - 60_000,
        last_timestamp_ms=last_ms,
        active=active,
    )


def log(*lives: int, **options: object) -> list[CompactionSegment]:
    """Sealed segments with these live bytes (of 1000), then the active segment."""
    sealed = [segment(index, live, **options) for index, live in enumerate(lives)]
    return [*sealed, segment(len(lives), SIZE, age=0.0, active=True)]


def run(segments, config=DEFAULT, free=PLENTY, segment_size=SIZE):
    return plan_compaction(segments, config=config, segment_size=segment_size, free_bytes=free, now=NOW)


def inputs(the_plan) -> list[tuple[int, ...]]:
    return [output.inputs for output in the_plan.outputs]


# --- candidates ----------------------------------------------------------------------------------------


def test_live_ratio_exactly_at_the_maximum_is_not_compacted():
    the_plan = run(log(500, 499), compaction(merge=False))
    assert inputs(the_plan) == [(100,)]
    assert the_plan.reasons(0) == (LIVE_RATIO,)
    assert the_plan.reasons(100) == ()


@pytest.mark.parametrize(("live", "used", "expected"), [(499, 500, True), (498, 500, True), (497, 500, False), (0, 0, False)])
def test_the_live_ratio_rule_the_store_is_given_is_the_plans(live, used, expected):
    # The executor hands too_live_to_compact to the store to describe only candidates: the same
    # rule the plan's reasons come from (a segment without records is always a candidate).
    config = compaction(max_live_ratio=0.996, merge=False)
    assert too_live_to_compact(config, live, used) is expected
    the_plan = run([segment(0, live, used=used), segment(1, SIZE, age=0.0, active=True)], config)
    assert (LIVE_RATIO in the_plan.reasons(0)) is expected


def test_ratio_is_live_over_record_bytes_not_file_size():
    # 300 live of 500 written is 60 % live although the file is 1000 bytes.
    the_plan = run([segment(0, 300, used=500), segment(1, 200, used=500), segment(2, SIZE, active=True)], compaction(merge=False))
    assert inputs(the_plan) == [(100,)]
    assert the_plan.reasons(0) == (LIVE_RATIO,)


def test_the_active_segment_is_never_compacted_flagged_or_last():
    flagged = run(log(0, 0))
    assert flagged.reasons(200) == (ACTIVE, LIVE_RATIO)
    unflagged = run([segment(0, 0), segment(1, 0)])  # the writer may be in another process
    assert inputs(unflagged) == [(0,)]
    assert unflagged.reasons(100) == (ACTIVE,)


def test_an_archived_segment_is_never_rewritten_nor_merged_with_its_neighbours():
    segments = log(100, 100, 100)
    segments[1] = replace(segments[1], archived=True)
    the_plan = run(segments)
    assert inputs(the_plan) == [(0,), (200,)]
    assert the_plan.reasons(100) == (ARCHIVED_SEGMENT,)


@pytest.mark.parametrize(("age", "young"), [(3600.0, False), (3599.999, True), (7200.0, False), (0.0, True)])
def test_min_age_counts_from_the_last_record(age, young):
    the_plan = run(log(100, age=age), compaction(min_age="1h"))
    assert the_plan.reasons(0) == ((YOUNG,) if young else ())


def test_min_age_zero_makes_nothing_young_even_a_timestamp_from_the_future():
    assert inputs(run(log(100, age=-60.0))) == [(0,)]


def test_a_segment_without_records_has_no_age_and_disappears():
    empty = CompactionSegment(0, 100, SIZE, 0, 0, None, None)
    the_plan = run([empty, segment(1, SIZE, active=True)], compaction(min_age="1h"))
    assert inputs(the_plan) == [(0,)]
    assert the_plan.outputs[0].write_bytes == 0


def test_disabled_keeps_everything_and_still_lists_the_other_reasons():
    the_plan = run(log(0, 900, 100, age=10.0), compaction(enabled=False, min_age="1m"))
    assert the_plan.outputs == ()
    assert the_plan.kept == {0: (DISABLED, YOUNG), 100: (DISABLED, YOUNG, LIVE_RATIO), 200: (DISABLED, YOUNG), 300: (DISABLED, ACTIVE, YOUNG, LIVE_RATIO)}


# --- order and output figures --------------------------------------------------------------------------


def test_lowest_live_ratio_first_and_empty_segments_before_any_copy():
    the_plan = run(log(300, 100, 900, 0, 900, 200), compaction(merge=False))
    assert inputs(the_plan) == [(300,), (100,), (500,), (0,)]
    assert [output.live_ratio for output in the_plan.outputs] == [0.0, 0.1, 0.2, 0.3]


def test_outputs_carry_the_bytes_to_read_write_and_reclaim():
    the_plan = run([segment(0, 300, used=800), segment(1, 0, used=1000, size=1000), segment(2, 100, used=400, size=600), segment(3, SIZE, active=True)], ANY_DEAD)
    (output,) = the_plan.outputs
    assert output.inputs == (0, 100, 200)
    assert (output.base_offset, output.end_offset) == (0, 300)
    assert (output.read_bytes, output.write_bytes, output.freed_bytes, output.reclaimed_bytes) == (2200, 400, 2600, 2200)
    assert (the_plan.read_bytes, the_plan.write_bytes, the_plan.reclaimed_bytes) == (2200, 400, 2200)


# --- merging -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("second", "merged"), [(400, True), (401, False)])
def test_merge_while_the_output_fits_exactly_in_segment_size(second, merged):
    the_plan = run(log(600, second), ANY_DEAD)
    assert inputs(the_plan) == ([(0, 100)] if merged else [(100,), (0,)])
    assert all(output.write_bytes <= SIZE for output in the_plan.outputs)


def test_merge_grows_while_it_fits_then_the_rest_is_its_own_output():
    assert inputs(run(log(500, 200, 300, 100), ANY_DEAD)) == [(100, 200, 300), (0,)]


def test_merge_grows_towards_the_lower_ratio_neighbour_then_left_on_a_tie():
    # The seed (100) can take one neighbour only: the right one (200, ratio 0.2) beats the left (300).
    assert inputs(run(log(300, 100, 200), ANY_DEAD, segment_size=350)) == [(100, 200), (0,)]
    assert inputs(run(log(100, 50, 100), ANY_DEAD, segment_size=150)) == [(0, 100), (200,)]


def test_merge_never_crosses_a_segment_that_is_not_a_candidate():
    the_plan = run(log(100, 900, 100))
    assert inputs(the_plan) == [(0,), (200,)]


def test_a_fully_dead_segment_bridges_two_candidates():
    assert inputs(run(log(100, 0, 0, 200))) == [(0, 100, 200, 300)]


def test_fully_dead_segments_that_bridge_nothing_disappear_on_their_own_first():
    the_plan = run(log(0, 0, 100, 900, 0))
    assert inputs(the_plan) == [(0, 100), (400,), (200,)]
    assert [output.write_bytes for output in the_plan.outputs] == [0, 0, 100]


def test_without_merge_every_candidate_is_its_own_output():
    the_plan = run(log(100, 0, 0, 200), compaction(merge=False))
    assert inputs(the_plan) == [(100,), (200,), (0,), (300,)]


# --- room on the disk ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("free", "planned"), [(300 + SIZE, True), (300 + SIZE - 1, False)])
def test_an_output_needs_room_for_itself_plus_one_segment(free, planned):
    the_plan = run(log(300), free=free)
    assert inputs(the_plan) == ([(0,)] if planned else [])
    assert the_plan.reasons(0) == (() if planned else (NO_ROOM,))


def test_room_is_a_running_total():
    segments = log(100, 900, 400, 900, 200)  # three single outputs: 100, 200, 400 bytes in ratio order
    the_plan = run(segments, free=100 + 200 + SIZE)
    assert inputs(the_plan) == [(0,), (400,)]
    assert the_plan.reasons(200) == (NO_ROOM,)
    assert inputs(run(segments, free=100 + 200 + 400 + SIZE)) == [(0,), (400,), (200,)]
    assert inputs(run(segments, free=100 + 200 + 400 + SIZE - 1)) == [(0,), (400,)]


def test_a_smaller_output_after_one_without_room_is_still_planned():
    # 400 of 1000 (ratio 0.4) comes first but has no room; 150 of 300 (ratio 0.5) fits.
    segments = [segment(0, 400), segment(1, SIZE), segment(2, 150, used=300), segment(3, SIZE, active=True)]
    the_plan = run(segments, ANY_DEAD, free=150 + SIZE)
    assert inputs(the_plan) == [(200,)]
    assert the_plan.reasons(0) == (NO_ROOM,)


def test_merging_stops_where_the_room_ends():
    # Room for 599 live bytes: 100 + 200 merge over the dead bridge, the 300 beyond would not fit.
    the_plan = run(log(100, 0, 0, 200, 0, 300), free=SIZE + 599)
    assert inputs(the_plan) == [(400,), (0, 100, 200, 300)]
    assert the_plan.reasons(500) == (NO_ROOM,)
    assert run(log(100, 0, 0, 200, 0, 300), free=SIZE + 600).reasons(500) == ()


def test_on_a_nearly_full_disk_cheap_segments_come_back_one_by_one():
    # One merged output of 400 bytes would need 1400 free; 200 of room still takes two segments.
    the_plan = run(log(100, 100, 100, 100), free=SIZE + 200)
    assert inputs(the_plan) == [(0, 100)]
    assert (the_plan.reasons(200), the_plan.reasons(300)) == ((NO_ROOM,), (NO_ROOM,))


def test_fully_dead_segments_go_first_even_when_their_neighbours_have_no_room():
    the_plan = run(log(100, 900, 200, 0, 300), free=100 + SIZE)
    assert inputs(the_plan) == [(300,), (0,)]
    assert (the_plan.reasons(200), the_plan.reasons(400)) == ((NO_ROOM,), (NO_ROOM,))


def test_a_segment_with_nothing_live_disappears_even_on_a_full_disk():
    the_plan = run(log(0, 900, 100), free=0)
    assert inputs(the_plan) == [(0,)]
    assert the_plan.reasons(200) == (NO_ROOM,)


# --- input checks --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("segments", "message"),
    [
        ([segment(1, 0), segment(0, 0)], "ordered by base_offset"),
        ([segment(0, 0, active=True), segment(1, 0)], "only the last segment may be active"),
    ],
)
def test_rejects_inconsistent_segments(segments, message):
    with pytest.raises(ValueError, match=message):
        run(segments)


@pytest.mark.parametrize(("live", "used", "size"), [(11, 10, 10), (0, 11, 10), (-1, 0, 0)])
def test_segment_rejects_impossible_byte_counts(live, used, size):
    with pytest.raises(ValueError, match="live_bytes <= used_bytes <= size_bytes"):
        CompactionSegment(0, 1, size, used, live)


def test_rejects_a_naive_time_and_a_non_positive_segment_size():
    with pytest.raises(ValueError, match="aware"):
        plan_compaction(log(0), config=DEFAULT, segment_size=SIZE, free_bytes=PLENTY, now=datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="segment_size must be positive"):
        run(log(0), segment_size=0)


# --- under disk pressure -------------------------------------------------------------------------------

FORCE = DiskConfig(clean_ratio=0.75, force_ratio=0.85, refuse_writes_ratio=0.90)


def pressure(segments, *, used_ratio=0.95, deletion_can_free=False, config=DEFAULT, disk=FORCE) -> bool:
    return should_compact_under_pressure(segments, config=config, disk=disk, used_ratio=used_ratio, deletion_can_free=deletion_can_free, now=NOW)


def test_pressure_compacts_when_deletion_cannot_free_and_segments_are_mostly_dead():
    assert pressure(log(100, 100)) is True


@pytest.mark.parametrize(("used_ratio", "expected"), [(0.85, False), (0.8501, True)])
def test_pressure_compaction_starts_strictly_above_force_ratio(used_ratio, expected):
    assert pressure(log(100), used_ratio=used_ratio) is expected


@pytest.mark.parametrize("used_ratio", [0.5, 0.85, 0.8501, 0.99])
def test_the_disks_half_of_pressure_compaction_is_the_whole_decisions(used_ratio):
    # The scheduler skips listing a filesystem's logs when the disk's half says no.
    for enabled in (True, False):
        for deletion_can_free in (True, False):
            config = compaction(enabled=enabled)
            disk_says = pressure_calls_for_compaction(config=config, disk=FORCE, used_ratio=used_ratio,
                                                      deletion_can_free=deletion_can_free)
            whole = pressure(log(100), used_ratio=used_ratio, deletion_can_free=deletion_can_free, config=config)
            assert disk_says is whole  # log(100) is a candidate, so the disk decides alone


def test_deletion_goes_first_under_pressure():
    assert pressure(log(100), deletion_can_free=True) is False


def test_pressure_compaction_needs_something_to_compact_and_compaction_on():
    assert pressure(log(900, 800)) is False  # mostly live
    assert pressure(log(100, age=10.0), config=compaction(min_age="1h")) is False  # young
    assert pressure([segment(0, 0, active=True)]) is False  # only the active segment
    assert pressure(log(100), config=compaction(enabled=False)) is False


def test_pressure_compaction_runs_even_when_disk_force_is_off():
    # Compaction drops only dead records, so it needs no permission to override protection.
    assert pressure(log(100), disk=DiskConfig(force=False)) is True


# --- throttle and time budget --------------------------------------------------------------------------

MIB = 2**20


@pytest.mark.parametrize(
    ("moved", "elapsed", "wait"),
    [(64 * MIB, 0.5, 0.5), (64 * MIB, 1.0, 0.0), (64 * MIB, 2.0, 0.0), (0, 0.0, 0.0), (32 * MIB, 0.0, 0.5)],
)
def test_throttle_waits_until_bytes_read_plus_written_match_the_rate(moved, elapsed, wait):
    assert throttle_delay(moved, elapsed, 64 * MIB) == pytest.approx(wait)


@pytest.mark.parametrize(("moved", "elapsed", "rate"), [(-1, 0.0, 1), (1, -0.1, 1), (1, 0.0, 0)])
def test_throttle_rejects_impossible_inputs(moved, elapsed, rate):
    with pytest.raises(ValueError, match="expected bytes_moved >= 0"):
        throttle_delay(moved, elapsed, rate)


@pytest.mark.parametrize(("elapsed", "more"), [(0.0, True), (59.999, True), (60.0, False), (61.0, False)])
def test_a_pass_starts_no_output_once_its_time_budget_is_spent(elapsed, more):
    assert within_pass_budget(elapsed, DEFAULT) is more


def test_reason_vocabulary_is_defined_once_with_explanations():
    assert set(COMPACTION_REASONS) == {DISABLED, ACTIVE, YOUNG, LIVE_RATIO, NO_ROOM, ARCHIVED_SEGMENT}
    assert all(COMPACTION_REASONS.values())
    with pytest.raises(TypeError):
        COMPACTION_REASONS["x"] = "y"  # type: ignore[index]


# --- properties ----------------------------------------------------------------------------------------


@st.composite
def scenarios(draw):
    count = draw(st.integers(0, 12))
    segments = []
    for index in range(count):
        size = draw(st.integers(0, SIZE))
        used = draw(st.integers(0, size))
        live = draw(st.sampled_from([0, used, draw(st.integers(0, used))]))
        age = draw(st.sampled_from([0.0, 1800.0, 3600.0, DAY]))
        segments.append(segment(index, live, used=used, size=size, age=age, active=index == count - 1 and draw(st.booleans())))
    config = compaction(
        max_live_ratio=draw(st.sampled_from([0.1, 0.5, 0.75, 1])),
        merge=draw(st.booleans()),
        min_age=draw(st.sampled_from(["0s", "1h"])),
        enabled=draw(st.booleans()),
    )
    free = draw(st.integers(0, 6 * SIZE))
    return segments, config, free


@settings(max_examples=400, deadline=None)
@given(scenarios())
def test_every_plan_keeps_the_selection_rules(scenario):
    segments, config, free = scenario
    the_plan = run(segments, config, free=free)
    position = {seg.base_offset: index for index, seg in enumerate(segments)}
    in_outputs = [base for output in the_plan.outputs for base in output.inputs]

    # Every segment is either in exactly one output or kept with reasons from the vocabulary.
    assert len(in_outputs) == len(set(in_outputs))
    assert set(in_outputs).isdisjoint(the_plan.kept)
    assert set(in_outputs) | set(the_plan.kept) == set(position)
    assert all(reasons and set(reasons) <= set(COMPACTION_REASONS) for reasons in the_plan.kept.values())

    planned_bytes = 0
    for output in the_plan.outputs:
        indexes = [position[base] for base in output.inputs]
        chosen = [segments[index] for index in indexes]
        assert indexes == list(range(indexes[0], indexes[-1] + 1))  # a run of consecutive segments
        for seg in chosen:  # only candidates: enabled, sealed, old enough, ratio below the maximum
            assert config.enabled and not seg.active and position[seg.base_offset] != len(segments) - 1
            assert seg.live_ratio < config.max_live_ratio
            assert config.min_age == 0 or NOW_MS - seg.last_timestamp_ms >= config.min_age * 1000
        assert output.write_bytes == sum(seg.live_bytes for seg in chosen)
        if len(chosen) > 1:
            assert config.merge
            assert output.write_bytes <= SIZE
        planned_bytes += output.write_bytes
    assert planned_bytes == 0 or planned_bytes + SIZE <= free  # all outputs fit together beside a spare segment
    order = [(output.live_ratio, output.base_offset) for output in the_plan.outputs]
    assert order == sorted(order)
    # Fully dead candidates are never held back for room, and no-room is only ever the sole reason.
    for base, reasons in the_plan.kept.items():
        if NO_ROOM in reasons:
            assert reasons == (NO_ROOM,) and segments[position[base]].live_bytes > 0
            # Room only shrinks while a plan is formed, so what was left out would not fit now either.
            assert planned_bytes + segments[position[base]].live_bytes + SIZE > free
