"""What a compaction plan sees of a log's segments: `CommitLog.segments()` as
`CompactionSegment`s whose live bytes are what an output of each would hold (live records, the
gap records standing for dropped runs, and for a keyed log what the liveness rule drops beyond the
store's marks). Pure functions but `keyed_dead`, which reads the log; thread-safe as the log is.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

from commitlog import CommitLog, SegmentInfo
from commitlog.record import encode_gap, encoded_size
from policies import SUPERSEDED, TOMBSTONE, CompactionSegment, LivenessRule

__all__ = ["compaction_segments", "keyed_dead"]

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


def compaction_segments(infos: Sequence[SegmentInfo], extra_dead: dict[int, int] | None = None
                        ) -> list[CompactionSegment]:
    """`CommitLog.segments()` as the planner sees them, oldest first, the active one last;
    `extra_dead`: base offset -> bytes the rule drops beyond the store's marks (keyed logs).
    `live_bytes` is what an output of the segment would hold: live records and estimated gaps."""
    out = []
    for s in infos:
        live = s.used_bytes if s.live_bytes is None else s.live_bytes
        live = _with_gaps(max(0, live - (extra_dead or {}).get(s.base_offset, 0)), s.used_bytes, s.record_count)
        out.append(CompactionSegment(s.base_offset, s.end_offset, s.size, s.used_bytes, live,
                                     s.first_timestamp_ms, s.last_timestamp_ms, s.active))
    return out


def keyed_dead(log: CommitLog, rule: LivenessRule, infos: Sequence[SegmentInfo]) -> dict[int, int]:
    """Bytes of the sealed segments' records the rule drops as superseded or tombstone (marked
    ones are already out of the store's live bytes, and a scan does not return them)."""
    if len(infos) < 2:
        return {}
    bases = [s.base_offset for s in infos]
    dead: dict[int, int] = {}
    for r in log.scan(max(log.start_offset, infos[0].base_offset), infos[-1].base_offset, zero_copy=True):
        key = r.key
        if key is None:
            continue
        if rule.cause(r.offset, key, len(r.value) == 0, False) in (SUPERSEDED, TOMBSTONE):
            base = bases[bisect.bisect_right(bases, r.offset) - 1]
            dead[base] = dead.get(base, 0) + encoded_size(len(r.value), len(key))
    return dead
