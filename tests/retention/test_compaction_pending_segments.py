"""An unkeyed log's dead records that a pending range keeps are dropped once the range ends: a
segment holding one is not rewritten meanwhile, whether its marks are only partly pending or its
earlier marks were applied by an earlier compaction. (A rewrite that keeps a marked record applies
its mark: the segment then counts it live and is passed over, and the record stayed until
retention deleted the segment.) Real logs, the store's own compaction."""

from __future__ import annotations

from commitlog import CommitLog
from retention.compaction.compactor import Compactor

from compaction_helpers import SEGMENT, VALUE, compaction_config


def _log(path) -> tuple[int, int]:
    """A log of three sealed segments plus an active one; the middle sealed segment's [base, end)."""
    with CommitLog.open(path, segment_size=SEGMENT, flush="none") as log:
        i = 0
        while len(log.segments()) < 4:
            log.append(VALUE + str(i).encode())
            i += 1
        s = log.segments()[1]
        return s.base_offset, s.end_offset


def _pass(config, ranges: list) -> list:
    """One compaction pass with `ranges` pending; its outputs' dropped-dead counts."""
    c = Compactor(config, pending=lambda path: list(ranges))
    try:
        result = c.run()
    finally:
        c.close()
    assert not result.failed, [e.error for e in result.logs]
    return [o.dropped["dead"] for e in result.logs for o in e.outputs]


def _held(path, lo: int, hi: int) -> list[int]:
    """The offsets in [lo, hi) the segment files still hold (dead ones included)."""
    with CommitLog.open(path, readonly=True) as log:
        return [o for o, *_ in log.record_facts(log.marks_snapshot(), lo, hi)]


def test_a_segment_only_partly_pending_has_its_pending_dead_records_dropped_once_the_range_ends(tmp_path):
    base, end = _log(tmp_path / "a")
    mid = (base + end) // 2
    with CommitLog.open(tmp_path / "a", flush="none") as log:
        log.mark_dead(range(base, end))                  # an aborted attempt's records, all dead
    _, config = compaction_config(tmp_path, tmp_path / "a")
    pending = [(mid, 2**63)]                             # another attempt still writing from mid
    _pass(config, pending)
    assert set(range(mid, end)) <= set(_held(tmp_path / "a", base, end)), "a pending record was dropped"
    pending.clear()                                      # the attempt finished
    _pass(config, pending)
    _pass(config, pending)
    assert _held(tmp_path / "a", base, end) == [], "dead records a pending range kept are never dropped"


def test_a_compacted_segment_whose_new_marks_are_all_pending_is_not_rewritten_with_nothing_dropped(tmp_path):
    base, end = _log(tmp_path / "a")
    cut = base + 2 * (end - base) // 3
    with CommitLog.open(tmp_path / "a", flush="none") as log:
        log.mark_dead(range(base, cut))
    _, config = compaction_config(tmp_path, tmp_path / "a")
    assert _pass(config, []) == [cut - base]             # compacted once: its marks applied, kept in the file
    with CommitLog.open(tmp_path / "a", flush="none") as log:
        log.mark_dead(range(cut, end))                   # the rest dead, inside a pending range
    pending = [(cut, 2**63)]
    assert _pass(config, pending) == [], "rewritten though a pending range keeps every dead record"
    pending.clear()
    _pass(config, pending)
    assert _held(tmp_path / "a", base, end) == [], "dead records a pending range kept are never dropped"
