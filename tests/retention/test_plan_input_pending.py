"""`plan_input.held` against a brute-force set, 300 random cases: sorted, disjoint marked ranges
within pending ranges given in any order, overlapping, touching, empty, or reaching past 2**62."""

from __future__ import annotations

import random

from policies import PendingRanges
from retention.compaction.plan_input import held


def _ranges(rng: random.Random, top: int, n: int, disjoint: bool) -> list[tuple[int, int]]:
    out, at = [], 0
    for _ in range(n):
        if disjoint:
            start = at + rng.randint(0 if out else 0, 3)
            end = start + rng.randint(1, 6)
            if out and start == out[-1][1] and rng.random() < 0.5:
                start += 1                       # sometimes touching, sometimes not
                end += 1
            out.append((start, end))
            at = end
        else:
            start = rng.randint(0, top)
            out.append((start, start + rng.randint(0, 8)))
    return out


def _cases():
    """300 random (marked ranges as starts and ends, their offsets, pending ranges)."""
    for seed in range(300):
        rng = random.Random(seed)
        marks = _ranges(rng, 60, rng.randint(0, 8), True)
        pending = _ranges(rng, 60, rng.randint(0, 6), False)
        if rng.random() < 0.2:
            pending.append((rng.randint(0, 60), 2**63))
        offsets = {o for s, e in marks for o in range(s, e)}
        yield [s for s, _ in marks], [e for _, e in marks], offsets, PendingRanges(pending)


def _offsets(starts, ends) -> set[int]:
    assert all(s < e for s, e in zip(starts, ends)), "an empty range"
    assert all(e1 <= s2 for e1, s2 in zip(ends, starts[1:])), "ranges out of order or overlapping"
    return {o for s, e in zip(starts, ends) for o in range(s, e)}


def test_held_is_the_marked_offsets_inside_the_pending_ranges():
    for starts, ends, marked, pending in _cases():
        assert _offsets(*held(starts, ends, pending)) == {o for o in marked if o in pending}
