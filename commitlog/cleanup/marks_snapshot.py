"""The marked ranges of a log at one instant, as compaction reads them.

A compaction takes one `MarksSnapshot` before its caller builds the key index, and both walks (the
key index's and the rewrite's) consult that same snapshot, so a mark arriving in between cannot
drop a key's only value. Immutable; safe to share between threads.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..segments.segment_list import SegmentList

NEVER = 1 << 64                       # past every offset: no marked range left


@dataclass(frozen=True)
class MarksSnapshot:
    """The marked ranges at one instant, with the marks sequence number. Immutable."""

    seq: int
    starts: tuple[int, ...] = field(repr=False)
    ends: tuple[int, ...] = field(repr=False)

    def is_marked(self, offset: int) -> bool:
        i = bisect.bisect_right(self.starts, offset) - 1
        return i >= 0 and offset < self.ends[i]

    def range_from(self, offset: int, lo: int = 0) -> tuple[int, int, int]:
        """(i, start, end) of the first marked range ending after `offset`, searched from index
        `lo`; (i, NEVER, NEVER) when there is none. A walk keeps `i` and asks again only once
        past `end`."""
        i = bisect.bisect_right(self.ends, offset, lo)
        if i < len(self.ends):
            return i, self.starts[i], self.ends[i]
        return i, NEVER, NEVER


def snapshot(segs: SegmentList) -> MarksSnapshot:
    """The marks of the log `segs` belongs to, now."""
    seq, starts, ends = segs.marks.snapshot()
    return MarksSnapshot(seq, starts, ends)
