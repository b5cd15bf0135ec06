"""What a compaction plan sees of a log's segments: `CommitLog.segments()` as
`CompactionSegment`s whose live bytes are what an output of each would hold (live records, what
the runs of dropped offsets cost, and for a keyed log what the liveness rule drops beyond the
store's marks). A run costs the offset delta of the record kept after it, or a gap record when
it ends the segment (commitlog.record.removed_run_bytes). The
runs are known from the marks' ranges (an unkeyed log: a segment holding a marked record a
pending range keeps is not rewritten) or a keyed log's scan, estimated
otherwise. Exact for a segment no compaction rewrote yet; one rewritten may be counted a few
bytes over (a dropped record's own delta). Pure functions
but `keyed_dead`, which reads the log; thread-safe as the log is.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from datetime import datetime

from commitlog import CommitLog, SegmentInfo
from commitlog.archive import Manifest
from commitlog.record import DELTA_SIZE, encoded_size, removed_run_bytes
from policies import (SUPERSEDED, TOMBSTONE, CompactionSegment, GroupSnapshot, KeyIndex, LivenessRule, PendingRanges,
                      PolicyConfig, stale_groups)

__all__ = ["compaction_segments", "held", "keyed_live", "marked_runs", "pass_rule"]


def _with_runs(live: int, used: int, spanned: int) -> int:
    """`live` plus an estimate of what the runs of dropped records cost in an output of this
    segment: a delta per run, at most one per kept record, counted with the segment's mean record
    size, and a gap record where the segment ends (the plan merges while live bytes fit in
    segment_size; an output the estimate undercounts could outgrow a segment, which the store
    refuses)."""
    if live <= 0 or live >= used or spanned <= 0:
        return max(0, live)
    mean = used / spanned
    runs = math.ceil(min((used - live) / mean, live / mean))
    return min(used, live + runs * DELTA_SIZE + removed_run_bytes(ends_input=True))


def compaction_segments(infos: Sequence[SegmentInfo], live: dict[int, int] | None = None,
                        runs: dict[int, int] | None = None,
                        archived: Manifest | None = None) -> list[CompactionSegment]:
    """`CommitLog.segments()` as the planner sees them, oldest first, the active one last;
    `live`: base offset -> the bytes an output of the segment holds, where counted (`keyed_live`);
    `runs`: base offset -> bytes the runs of dropped offsets in the segment cost, where known
    (`marked_runs`: a sealed segment it leaves out has nothing to drop); `archived`: the log's
    archive manifest, whose segments are left alone. `live_bytes` is what an output of the
    segment would hold: live records and what its runs cost (estimated where its runs are not known)."""
    out = []
    for s in infos:
        counted = None if live is None or s.active else live.get(s.base_offset, 0)
        if counted is not None:
            size = min(s.used_bytes, counted)
        else:
            size = s.used_bytes if s.live_bytes is None else max(0, s.live_bytes)
            known = None if runs is None else runs.get(s.base_offset)
            if runs is not None and known is None and not s.active:
                size = s.used_bytes     # nothing it may drop (unmarked, or a marked record pending)
            elif known is not None and 0 < size < s.used_bytes:
                size = min(s.used_bytes, size + known)
            else:
                size = _with_runs(size, s.used_bytes, s.record_count)
        out.append(CompactionSegment(s.base_offset, s.end_offset, s.size, s.used_bytes, size,
                                     s.first_timestamp_ms, s.last_timestamp_ms, s.active,
                                     archived is not None and archived.find(s.base_offset) is not None))
    return out


def held(starts: Sequence[int], ends: Sequence[int], pending: PendingRanges) -> tuple[list[int], list[int]]:
    """The parts of the marked ranges `[starts[i], ends[i])` (sorted, disjoint) inside the `pending`
    ones: marked records a compaction keeps, as (starts, ends), sorted."""
    spans, out_starts, out_ends, i, j = list(pending), [], [], 0, 0
    while i < len(starts) and j < len(spans):
        lo, hi = max(starts[i], spans[j][0]), min(ends[i], spans[j][1])
        if lo < hi:
            out_starts.append(lo)
            out_ends.append(hi)
        if ends[i] < spans[j][1]:
            i += 1
        else:
            j += 1
    return out_starts, out_ends


def marked_runs(starts: Sequence[int], ends: Sequence[int], infos: Sequence[SegmentInfo]) -> dict[int, int]:
    """Per sealed segment with a run of marked offsets (the ranges `[starts[i], ends[i])`, sorted;
    touching ones are one run), the bytes its runs cost in its output: what an
    unkeyed log's compaction drops. A sealed segment without one is left out (nothing to drop)."""
    costs: dict[int, int] = {}
    for s in infos:
        if s.active:
            continue
        i = max(0, bisect.bisect_right(starts, s.base_offset) - 1)
        cost, run_to = 0, None
        while i < len(starts) and starts[i] < s.end_offset:
            if ends[i] > s.base_offset:
                if run_to is not None and starts[i] > run_to:
                    cost += DELTA_SIZE              # the run before ends at a kept record
                run_to = max(ends[i], run_to or 0)
            i += 1
        if run_to is not None:
            costs[s.base_offset] = cost + removed_run_bytes(ends_input=run_to >= s.end_offset)
    return costs


def keyed_live(log: CommitLog, rule: LivenessRule, infos: Sequence[SegmentInfo]) -> dict[int, int]:
    """Per sealed segment, the bytes its output would hold under `rule`, counted record by record:
    each record the scan returns that the rule keeps (not superseded, not a tombstone past its
    time), with the offset delta it carries when offsets before it are dropped (marked records,
    which a scan does not return; earlier removed runs; records the rule drops), and a gap record
    when dropped offsets end the segment. A segment none of whose records is kept holds 0."""
    if len(infos) < 2:
        return {}
    bases = [s.base_offset for s in infos]
    live: dict[int, int] = {base: 0 for base in bases[:-1]}
    base = end = -1      # the segment of the previous record, and the end of its span
    kept_to = -1         # the offset after the last record kept in it

    def close_segment() -> None:
        if live[base] and kept_to < end:
            live[base] += removed_run_bytes(ends_input=True)

    first = max(log.start_offset, infos[0].base_offset)
    for r in log.scan(first, infos[-1].base_offset, zero_copy=True):
        offset = r.offset
        if offset >= end:                       # a new segment: its output is counted alone
            if base >= 0:
                close_segment()
            i = bisect.bisect_right(bases, offset) - 1
            base, end, kept_to = bases[i], infos[i].end_offset, bases[i]
        key = r.key
        if key is not None and rule.cause(offset, key, len(r.value) == 0, False) in (SUPERSEDED, TOMBSTONE):
            continue
        size = encoded_size(len(r.value), 0 if key is None else len(key))
        live[base] += size + (removed_run_bytes(ends_input=False) if offset > kept_to else 0)
        kept_to = offset + 1
    if base >= 0:
        close_segment()
    return live


def pass_rule(log: CommitLog, policy: PolicyConfig, at: datetime, marks, pending: PendingRanges,
              infos: Sequence[SegmentInfo], end: int):
    """(rule, bytes each segment's output holds (keyed logs, counted record by record), what the
    runs of marked offsets cost per segment (unkeyed logs), tombstones seen for the first
    time, the moments (epoch s) a tombstone's retention ends or a group's silence outlasts
    consumer_ttl: what the rule drops may change then)."""
    cfg = policy.compaction
    if not cfg.keys:
        runs = marked_runs(marks.starts, marks.ends, infos)
        # Not a segment holding a marked record a pending range keeps: its output would apply that
        # mark (`marks_seq`), after which the segment counts the record live and is passed over for
        # good (the record stays until retention); rewritten whole once the range ends. The
        # segments left hold no marked record inside a pending range: their runs are all droppable.
        for base in marked_runs(*held(marks.starts, marks.ends, pending), infos):
            runs.pop(base, None)
        return LivenessRule(cfg, at, pending=pending), None, runs, {}, []
    index = KeyIndex(pending)
    tombstones: list[tuple[int, bytes]] = []
    for offset, key, tombstone, marked in log.record_facts(marks, None, end):
        index.note(offset, key, marked)
        if tombstone and key is not None and not marked:
            tombstones.append((offset, key))
    first_seen = log.tombstones_first_seen()
    committed, times = log.committed(), log.commit_times()
    groups = [GroupSnapshot(g, o, times.get(g, 0.0)) for g, o in committed.items()]
    stale = stale_groups(groups, at.timestamp(), policy.consumer_ttl)
    newest = index.newest
    rule = LivenessRule(cfg, at, newest=newest, tombstones_first_seen=first_seen, committed=committed,
                        stale_groups=stale, pending=pending)
    fresh = {o: rule.first_seen(o) for o, k in tombstones
             if newest.get(k) == o and o not in first_seen and rule.cause(o, k, True, False) is None}
    moments = [t + cfg.tombstone_retention for t in first_seen.values()]
    moments += [t + policy.consumer_ttl for t in times.values()]
    return rule, keyed_live(log, rule, infos), None, fresh, moments
