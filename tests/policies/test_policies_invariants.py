"""Properties every plan keeps whatever the snapshot, the snapshot's own checks, and the package's purity."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from plan_builders import HOUR, NOW, NOW_TS, group, policies, policy, plan_by_policy

from policies import (
    DELETE,
    DISK_FORCE,
    REFUSE_WRITES,
    MANUAL,
    RESERVED,
    DiskSnapshot,
    GroupSnapshot,
    HungSegment,
    LogSnapshot,
    ManualTrigger,
    SegmentSnapshot,
    unconsumed_group,
)

PACKAGE = Path(__file__).resolve().parents[2] / "policies"


@st.composite
def log_snapshots(draw, name: str, disk: DiskSnapshot) -> LogSnapshot:
    ages = draw(st.lists(st.floats(min_value=0, max_value=200), max_size=8))
    sizes = draw(st.lists(st.integers(min_value=0, max_value=20_000), min_size=len(ages), max_size=len(ages)))
    segments = tuple(
        SegmentSnapshot(
            base_offset=index * 100,
            end_offset=index * 100 + 100,
            path=f"/logs/{name}/{index * 100:020d}.log",
            size_bytes=size,
            mtime=NOW_TS - age * HOUR,
            active=index == len(ages) - 1,
        )
        for index, (age, size) in enumerate(zip(ages, sizes))
    )
    groups = draw(
        st.lists(
            st.builds(group, st.sampled_from(["etl", "audit", "spark"]), st.integers(0, 900), idle_hours=st.floats(0, 400)),
            max_size=3,
            unique_by=lambda found: found.name,
        )
    )
    hung_offsets = draw(st.sets(st.sampled_from([segment.base_offset for segment in segments]), max_size=2)) if segments else set()
    hung = {offset: HungSegment(NOW_TS - draw(st.floats(0, 300)), NOW_TS - draw(st.floats(0, 100))) for offset in hung_offsets}
    return LogSnapshot(name=name, path=f"/logs/{name}", policy="default", segments=segments, groups=tuple(groups), disk=disk, hung=hung)


@st.composite
def scenarios(draw):
    capacity = draw(st.integers(min_value=1, max_value=200_000))
    used = draw(st.integers(min_value=0, max_value=capacity))
    filesystem_ids = draw(st.lists(st.integers(1, 2), min_size=1, max_size=3))
    logs = [
        draw(log_snapshots(f"log{index}", DiskSnapshot(fs, capacity, used, capacity - used)))
        for index, fs in enumerate(filesystem_ids)
    ]
    configured = policy(
        files_per_pass=draw(st.integers(1, 5)),
        protect_unconsumed=draw(st.booleans()),
        delete_at_hours=draw(st.sampled_from([[], [12], [4]])),
        disk={"force": draw(st.booleans())},
    )
    manual = ManualTrigger(draw(st.integers(0, 2)), draw(st.booleans()))
    return logs, configured, manual


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_every_plan_keeps_the_rules(scenario):
    logs, configured, manual = scenario
    result = plan_by_policy(logs, policies(default=configured), NOW, {"default": manual})
    assert result == plan_by_policy(logs, policies(default=configured), NOW, {"default": manual})
    for snapshot, log_plan in zip(logs, result.logs):
        actions = [decision.action for decision in log_plan.decisions]
        deleted = log_plan.to_delete
        assert len(log_plan.decisions) == len(snapshot.segments)
        # Deletions are a prefix: no hole, and never the last (active) segment.
        assert actions == sorted(actions, key=lambda action: action != DELETE)
        assert not snapshot.segments or actions[-1] != DELETE
        assert len(deleted) <= configured.files_per_pass
        assert log_plan.triggers or not deleted
        protecting = {g.name for g in snapshot.groups if NOW_TS - g.last_commit_at <= configured.consumer_ttl}
        for decision in log_plan.decisions:
            assert bool(decision.reasons) == (decision.action != DELETE)
            if decision.action != DELETE:
                continue
            if decision.age_seconds < configured.reserve:
                assert RESERVED in decision.overridden and decision.overridden_by in (DISK_FORCE, REFUSE_WRITES, MANUAL)
            needed_by = {found.group for found in decision.unconsumed} & protecting
            if configured.protect_unconsumed and needed_by:
                assert decision.overridden_by in (DISK_FORCE, REFUSE_WRITES)
                assert needed_by == {unconsumed_group(code) for code in decision.overridden} - {None}
            if decision.forced:
                assert decision.retry


def test_used_ratio_is_used_over_used_plus_free_as_df_shows():
    # total includes the root reserve, which df's Use% leaves out.
    assert DiskSnapshot(1, total_bytes=1000, used_bytes=450, free_bytes=450).used_ratio == 0.5
    assert DiskSnapshot(1, total_bytes=0, used_bytes=0, free_bytes=0).used_ratio == 0.0


def test_snapshot_freezes_its_collections():
    hung = {0: HungSegment(1.0, 2.0)}
    segments = [SegmentSnapshot(0, 10, "/l/00000000000000000000.log", 1, 0.0, True)]
    snapshot = LogSnapshot("l", "/l", "default", segments, [], DiskSnapshot(1, 1, 0, 1), hung)
    hung[5] = HungSegment(3.0, 4.0)
    segments.append(segments[0])
    assert isinstance(snapshot.segments, tuple) and len(snapshot.segments) == 1
    assert dict(snapshot.hung) == {0: HungSegment(1.0, 2.0)}
    with pytest.raises(TypeError):
        snapshot.hung[9] = HungSegment(0.0, 0.0)  # type: ignore[index]


@pytest.mark.parametrize(
    ("segments", "groups", "message"),
    [
        (
            [SegmentSnapshot(100, 200, "b", 1, 0.0, False), SegmentSnapshot(0, 100, "a", 1, 0.0, True)],
            [],
            "ordered by base_offset",
        ),
        ([SegmentSnapshot(0, 100, "a", 1, 0.0, True), SegmentSnapshot(100, 200, "b", 1, 0.0, False)], [], "only the last"),
        ([], [GroupSnapshot("etl", 0, 0.0), GroupSnapshot("etl", 5, 0.0)], "group names repeat"),
    ],
)
def test_snapshot_rejects_inconsistent_input(segments, groups, message):
    with pytest.raises(ValueError, match=message):
        LogSnapshot("l", "/l", "default", segments, groups, DiskSnapshot(1, 1, 0, 1))


@pytest.mark.parametrize(("base", "end", "size", "message"), [(10, 5, 1, "below base_offset"), (0, 5, -1, "must not be negative")])
def test_segment_snapshot_rejects_impossible_values(base, end, size, message):
    with pytest.raises(ValueError, match=message):
        SegmentSnapshot(base, end, "/l/x.log", size, 0.0, False)


def test_policies_imports_nothing_from_commitlog_or_retention():
    code = (
        "import sys, policies; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('commitlog', 'retention', 'pyspark')); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    completed = subprocess.run([sys.executable, "-c", code], cwd=PACKAGE.parent, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_policies_reads_no_clock_and_never_sleeps():
    clock = re.compile(r"\b(time\.time|time\.sleep|time\.monotonic|datetime\.now|datetime\.utcnow|date\.today)\b")
    offenders = [path.name for path in PACKAGE.glob("*.py") if clock.search(path.read_text(encoding="utf-8"))]
    assert offenders == []
