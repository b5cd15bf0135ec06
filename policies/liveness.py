"""The one liveness rule: which records of a log a compaction keeps, and why it drops the others.

Per record, from its offset, key, whether its value is empty and whether it is marked, first match
wins: **pending** (a range an unfinished Spark job may still make visible) -> live; **marked** ->
``dead``; **superseded** (keyed logs: a later settled record of its key) -> ``superseded``;
**tombstone** (keyed, newest of its key, older than ``tombstone_retention`` since first seen, and
every group not stale committed past it) -> ``tombstone``; otherwise live. The newest offset of a
key counts *settled* records only (neither marked nor pending), built from the same snapshot of
marks and pending ranges the records are decided with. The store builds one :class:`LivenessRule`
per pass, calls :meth:`LivenessRule.cause` with each record's plain fields, records a kept
tombstone's :meth:`LivenessRule.first_seen`; :func:`count_dropped` gives the audit's counts. Why
each step: docs, Concepts, "Which records a compaction keeps".

Pure (the time is an input). :class:`PendingRanges` and :class:`LivenessRule` are immutable once
built and thread-safe; a :class:`KeyIndex` is a builder for one thread.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterable, Mapping
from datetime import datetime
from types import MappingProxyType

from policies.config import CompactionConfig
from policies.triggers import require_aware

__all__ = [
    "CAUSES",
    "DEAD",
    "SUPERSEDED",
    "TOMBSTONE",
    "KeyIndex",
    "LivenessRule",
    "PendingRanges",
    "count_dropped",
]

DEAD = "dead"
SUPERSEDED = "superseded"
TOMBSTONE = "tombstone"
CAUSES = (DEAD, SUPERSEDED, TOMBSTONE)
"""Every cause a record is dropped for, in the order the audit's ``dropped`` mapping lists them."""

_EMPTY_MAPPING: Mapping = MappingProxyType({})


class PendingRanges:
    """Offset ranges ``[start, end)`` that pending Spark jobs may still make visible. Immutable, thread-safe.

    Overlapping and touching ranges are merged; ``offset in ranges`` is a binary search.
    """

    __slots__ = ("_starts", "_ends")

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()) -> None:
        merged: list[list[int]] = []
        for start, end in sorted(_checked_range(pair) for pair in ranges):
            if start == end:
                continue  # an empty range makes nothing visible
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        self._starts = tuple(start for start, _ in merged)
        self._ends = tuple(end for _, end in merged)

    def __contains__(self, offset: int) -> bool:
        index = bisect.bisect_right(self._starts, offset) - 1
        return index >= 0 and offset < self._ends[index]

    def __iter__(self):
        return iter(zip(self._starts, self._ends))

    def __len__(self) -> int:
        return len(self._starts)

    def __repr__(self) -> str:
        return f"PendingRanges({list(self)!r})"


def _checked_range(pair: tuple[int, int]) -> tuple[int, int]:
    start, end = pair
    # bool is an int to Python, but True as an offset is a caller's mistake.
    if not all(isinstance(value, int) and not isinstance(value, bool) for value in pair) or not 0 <= start <= end:
        raise ValueError(f"a pending range must be two offsets 0 <= start <= end, got {pair!r}")
    return start, end


def _as_ranges(pending: PendingRanges | Iterable[tuple[int, int]]) -> PendingRanges:
    return pending if isinstance(pending, PendingRanges) else PendingRanges(pending)


class KeyIndex:
    """Builds the newest *settled* offset of every key, one record at a time. For one thread.

    Feed it every record of the log (all segments, the active one too: a later record anywhere
    supersedes), in any order, with :meth:`note`; then pass :attr:`newest` to :class:`LivenessRule`.
    Records without a key, marked records and records inside ``pending`` are skipped (see the module
    docstring: they must not supersede anything).
    """

    __slots__ = ("_pending", "_newest")

    def __init__(self, pending: PendingRanges | Iterable[tuple[int, int]] = ()) -> None:
        self._pending = _as_ranges(pending)
        self._newest: dict[bytes, int] = {}

    def note(self, offset: int, key: bytes | None, marked: bool) -> None:
        """Take one record into account."""
        if key is None or marked or offset in self._pending:
            return
        if offset > self._newest.get(key, -1):
            self._newest[key] = offset

    @property
    def newest(self) -> Mapping[bytes, int]:
        """Key -> offset of its newest settled record (a read-only view)."""
        return MappingProxyType(self._newest)


class LivenessRule:
    """The liveness rule of one log for one compaction pass (see the module docstring). Immutable, thread-safe.

    Build it once per pass, then call :meth:`cause` for each record; it allocates nothing per call.
    ``newest`` is :attr:`KeyIndex.newest` built with the same ``pending`` ranges (needed only when
    ``config.keys``); ``tombstones_first_seen`` maps a tombstone's offset to the epoch seconds of the
    compaction that first saw it (a tombstone missing from it is seen for the first time now);
    ``committed`` maps consumer group -> committed offset (everything below it consumed) and
    ``stale_groups`` names the groups that protect nothing (silent longer than ``consumer_ttl``).
    """

    __slots__ = ("_keys", "_retention", "_now", "_newest", "_first_seen", "_horizon", "_starts", "_ends")

    def __init__(
        self,
        config: CompactionConfig,
        now: datetime,
        *,
        newest: Mapping[bytes, int] = _EMPTY_MAPPING,
        tombstones_first_seen: Mapping[int, float] = _EMPTY_MAPPING,
        committed: Mapping[str, int] = _EMPTY_MAPPING,
        stale_groups: Collection[str] = (),
        pending: PendingRanges | Iterable[tuple[int, int]] = (),
    ) -> None:
        self._keys = config.keys
        self._retention = config.tombstone_retention
        self._now = require_aware(now).timestamp()
        self._newest = newest
        self._first_seen = tombstones_first_seen
        live_groups = [offset for group, offset in committed.items() if group not in stale_groups]
        # Every live group has consumed the offsets below the smallest committed one; None: no live group.
        self._horizon = min(live_groups) if live_groups else None
        # The range bounds are read inline in cause(): a method call per record costs more than the rule.
        ranges = _as_ranges(pending)
        self._starts, self._ends = ranges._starts, ranges._ends

    def cause(self, offset: int, key: bytes | None, tombstone: bool, marked: bool) -> str | None:
        """Return None when the record is live, else why it is dropped: ``dead``, ``superseded`` or ``tombstone``.

        ``tombstone`` is True when the record's value is empty; ``marked`` when it is marked dead.
        """
        starts = self._starts
        if starts:
            index = bisect.bisect_right(starts, offset) - 1
            if index >= 0 and offset < self._ends[index]:
                return None
        if marked:
            return DEAD
        if not self._keys or key is None:
            return None
        if self._newest.get(key, offset) > offset:
            return SUPERSEDED
        if tombstone and self._tombstone_expired(offset):
            return TOMBSTONE
        return None

    def _tombstone_expired(self, offset: int) -> bool:
        first_seen = self._first_seen.get(offset, self._now)
        if self._now - first_seen < self._retention:
            return False
        return self._horizon is None or self._horizon > offset

    def first_seen(self, offset: int) -> float:
        """Epoch seconds from which the tombstone at ``offset`` counts its retention (now if never seen)."""
        return self._first_seen.get(offset, self._now)


def count_dropped(causes: Iterable[str | None]) -> dict[str, int]:
    """The audit's ``dropped`` mapping: for each of :data:`CAUSES`, how many of ``causes`` name it.

    None (a live record) counts for nothing; any other value is a ``ValueError``. With ``()`` it is the
    zeroed mapping a streaming caller can increment itself.
    """
    counts = dict.fromkeys(CAUSES, 0)
    for cause in causes:
        if cause is None:
            continue
        if cause not in counts:
            raise ValueError(f"unknown cause {cause!r}; expected one of {', '.join(CAUSES)}")
        counts[cause] += 1
    return counts
