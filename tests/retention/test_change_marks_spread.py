"""The safety net's keys spread over the passes (retention/deletion/changes.py, `stagger`): of many
clean logs, none is keyed again before half of its reader's full-check period, every one by the
period, and no pass takes more than a small share of them. A pure decision over a given clock."""

from __future__ import annotations

import pytest

from retention.deletion.changes import ChangeMarks, Reader


@pytest.mark.parametrize(("reader", "every"), [(Reader.DELETION, 10.0), (Reader.COMPACTION, 300.0)])
def test_the_full_checks_of_many_clean_logs_fall_in_different_passes(reader, every):
    now = [1000.0]
    marks = ChangeMarks(clock=lambda: now[0])
    paths = [f"/var/lib/app/logs/log{i:05d}" for i in range(2000)]
    for i, path in enumerate(paths):
        marks.watched(path, (1, i))
        assert not marks.fresh(path, reader)          # its key taken: clean from now on
    period = reader.full_check
    keyed_at: dict[str, float] = {}
    largest = 0
    while now[0] < 1000.0 + period + every:
        now[0] += every
        keyed = [p for p in paths if p not in keyed_at and not marks.fresh(p, reader)]
        keyed_at.update((p, now[0] - 1000.0) for p in keyed)
        largest = max(largest, len(keyed))
    assert set(keyed_at) == set(paths), "every log keyed again within the period"
    assert min(keyed_at.values()) >= period / 2, "none before half of the period"
    assert max(keyed_at.values()) <= period + every
    passes = period / 2 / every
    assert largest <= 2.5 * len(paths) / passes, f"one pass took {largest} of {len(paths)} keys"


def test_a_log_keyed_again_is_clean_for_its_reader_only():
    now = [0.0]
    marks = ChangeMarks(clock=lambda: now[0])
    marks.watched("/logs/a", (1, 1))
    assert not marks.fresh("/logs/a", Reader.DELETION)
    assert marks.fresh("/logs/a", Reader.DELETION)
    assert not marks.fresh("/logs/a", Reader.COMPACTION), "the deletion pass's key is not compaction's"
    marks.dirty({"/logs/a"})
    assert not marks.fresh("/logs/a", Reader.DELETION) and not marks.fresh("/logs/a", Reader.COMPACTION)
