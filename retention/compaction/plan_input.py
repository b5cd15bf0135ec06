"""What a compaction plan sees of a log's segments: `CommitLog.segments()` as
`CompactionSegment`s whose live bytes are what an output of each would hold (live records, the
gap records standing for dropped runs, and for a keyed log what the liveness rule drops beyond the
store's marks). The gap records are counted from the runs of dropped offsets where they are known
(the marks' ranges; a keyed log's scan), estimated otherwise. Pure functions but `keyed_dead`,
which reads the log; thread-safe as the log is.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

from commitlog import CommitLog, SegmentInfo
from commitlog.record import encode_gap, encoded_size
from policies import SUPERSEDED, TOMBSTONE, CompactionSegment, LivenessRule

__all__ = ["compaction_segments", "keyed_dead", "marked_runs"]

_GAP_BYTES = len(encode_gap(1))           # one gap record standing for a run of dropped records


def _with_gaps(live: int, used: int, spanned: int) -> int:
    """`live` plus an estimate of the gap records an output of this segment holds: one per run of
    dropped records, at most one per kept record plus one, counted with the segment's mean record
    size (the plan merges while live bytes fit in segment_size; without the gaps a merged output
    could outgrow a segment, which the store refuses)."""
    if live <= 0 or live >= used or spanned <= 0:
        return max(0, live)
    mean = used / spanned
    gaps = math.ceil(min((used - live) / mean, live / mean + 1))
    return min(used, live + gaps * _GAP_BYTES)


def compaction_segments(infos: Sequence[SegmentInfo], extra_dead: dict[int, int] | None = None,
                        runs: dict[int, int] | None = None) -> list[CompactionSegment]:
    """`CommitLog.segments()` as the planner sees them, oldest first, the active one last;
    `extra_dead`: base offset -> bytes the rule drops beyond the store's marks (keyed logs);
    `runs`: base offset -> runs of dropped offsets in the segment, where known (`marked_runs`,
    `keyed_dead`). `live_bytes` is what an output of the segment would hold: live records and a gap
    record per run (estimated for a segment whose runs are not known)."""
    out = []
    for s in infos:
        live = s.used_bytes if s.live_bytes is None else s.live_bytes
        live = max(0, live - (extra_dead or {}).get(s.base_offset, 0))
        known = None if runs is None else runs.get(s.base_offset)
        if known is not None and 0 < live < s.used_bytes:
            live = min(s.used_bytes, live + known * _GAP_BYTES)
        else:
            live = _with_gaps(live, s.used_bytes, s.record_count)
        out.append(CompactionSegment(s.base_offset, s.end_offset, s.size, s.used_bytes, live,
                                     s.first_timestamp_ms, s.last_timestamp_ms, s.active))
    return out


def marked_runs(starts: Sequence[int], ends: Sequence[int], infos: Sequence[SegmentInfo]) -> dict[int, int]:
    """Per sealed segment, the runs of marked offsets in it (the marks' ranges `[starts[i],
    ends[i])`, sorted; touching ones are one run): what an unkeyed log's compaction drops."""
    runs: dict[int, int] = {}
    for s in infos:
        if s.active:
            continue
        i = max(0, bisect.bisect_right(starts, s.base_offset) - 1)
        count, last_end = 0, None
        while i < len(starts) and starts[i] < s.end_offset:
            if ends[i] > s.base_offset:
                if last_end is None or starts[i] > last_end:
                    count += 1
                last_end = max(ends[i], last_end or 0)
            i += 1
        runs[s.base_offset] = count
    return runs


def keyed_dead(log: CommitLog, rule: LivenessRule, infos: Sequence[SegmentInfo]
               ) -> tuple[dict[int, int], dict[int, int]]:
    """(bytes, runs) per sealed segment: the bytes of its records the rule drops as superseded or
    tombstone (marked ones are already out of the store's live bytes, and a scan does not return
    them), and the runs of offsets its compaction drops: those records, and the holes between the
    records the scan returns (marked records, earlier gaps), each run ending at a kept record."""
    if len(infos) < 2:
        return {}, {}
    bases = [s.base_offset for s in infos]
    dead: dict[int, int] = {}
    runs: dict[int, int] = {base: 0 for base in bases[:-1]}
    base = end = -1      # the segment of the previous record, and the end of its span
    previous = -1        # the previous record's offset
    dropping = False     # whether the offset before the next one is dropped
    first = max(log.start_offset, infos[0].base_offset)
    for r in log.scan(first, infos[-1].base_offset, zero_copy=True):
        offset = r.offset
        if offset >= end:                       # a new segment: runs count per segment
            if base >= 0 and previous + 1 < end and not dropping:
                runs[base] += 1                 # the last one's tail: marked records or a gap
            i = bisect.bisect_right(bases, offset) - 1
            base, end = bases[i], infos[i].end_offset
            dropping = False
            previous = max(base, first) - 1
        if offset > previous + 1 and not dropping:
            runs[base] += 1                     # a hole: marked records or an earlier gap
            dropping = True
        previous = offset
        key = r.key
        drop = key is not None and rule.cause(offset, key, len(r.value) == 0, False) in (SUPERSEDED, TOMBSTONE)
        if drop:
            dead[base] = dead.get(base, 0) + encoded_size(len(r.value), len(key))
            if not dropping:
                runs[base] += 1
        dropping = drop
    if base >= 0 and previous + 1 < end and not dropping:
        runs[base] += 1
    return dead, runs
