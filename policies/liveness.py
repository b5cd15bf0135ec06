"""The one liveness rule: which records of a log a compaction keeps, and why it drops the others.

The store decides each record from four plain facts it has at hand while it reads a segment: the
offset, the key (None for a record without one), whether the value is empty (a *tombstone*) and
whether the record is marked dead (``CommitLog.mark_dead``: aborted Spark jobs, failed attempts,
duplicate micro-batches). Everything else is per-log context given once per pass to
:class:`LivenessRule`: the policy's ``compaction.keys`` and ``compaction.tombstone_retention``, the
newest settled offset of every key (:class:`KeyIndex`), when each tombstone was first seen by a
compaction, the consumer groups' committed offsets and which of them are stale, the offset ranges a
pending Spark job may still make visible (:class:`PendingRanges`), and the time.

The rule, first match wins (the order is the precedence):

1. **pending** -> live. An offset inside a range a Spark job that has not finished may still make
   visible is kept whatever else holds, even when it is marked: dropping is irreversible while
   keeping costs only space until the job ends, and the next pass reclaims it then.
2. **marked** -> ``dead``. A mark is an explicit statement about that record, so it names the cause
   even when the record is also superseded or an old tombstone.
3. **superseded** -> ``superseded`` (keyed logs only). A record with a key is superseded when its
   key's newest settled record is later. Records without a key are never superseded. A tombstone
   that a later record of its key supersedes goes as ``superseded`` at once, without waiting for
   ``tombstone_retention`` or the groups: a consumer that missed it reads the later value instead,
   which is the state the tombstone led to anyway (Kafka drops superseded tombstones the same way).
4. **tombstone** -> ``tombstone`` (keyed logs only). A record with a key and an empty value that is
   the newest of its key is dropped once (a) at least ``tombstone_retention`` has passed since the
   compaction that first saw it (kept for ``[first_seen, first_seen + retention)``, dropped from
   ``first_seen + retention`` on, as ``reserve`` is for deletion), and (b) every consumer group that
   is not stale has committed past it: ``committed > offset`` (a group committed exactly at the
   tombstone's offset has not consumed it). With no group left that is not stale, (b) holds. A
   record with an empty value and no key deletes nothing, so it is an ordinary live record.
5. otherwise live (in particular the newest record of every key, and every record of an unkeyed log
   that is not marked).

*Settled* records are those neither marked nor inside a pending range. The newest offset of a key is
taken over settled records only (:class:`KeyIndex` applies this): a marked record never happened for
readers, so it must not bury the value before it, and a pending record may still be aborted, so it
must not either. The store must build the index and decide records from one snapshot of the marks
and of the pending ranges (a mark arriving in between would otherwise drop the key's only value).

The store applies the rule streaming: it builds one :class:`LivenessRule` per pass and calls
:meth:`LivenessRule.cause` with the plain fields of each record it reads (no per-record object, no
allocation on the hot path); a tombstone kept this pass and absent from ``tombstones_first_seen``
should be recorded with :meth:`LivenessRule.first_seen` so the next pass counts its retention.
:func:`count_dropped` gives the audit's ``dropped: {dead, superseded, tombstone}``.

Everything here is pure (the time is an input). :class:`PendingRanges` and :class:`LivenessRule`
are immutable once built and thread-safe; a :class:`KeyIndex` is a builder for one thread.
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
