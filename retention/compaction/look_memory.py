"""Change-driven compaction: a log whose last look found nothing to compact, and none of whose
inputs to compaction can have changed since, is not looked at again (not listed, opened or read);
its part of the pass is the empty one that look gave (docs: operations.md, "Change-driven passes").

Its key, taken before the look: the deletion pass's (`retention.deletion.unchanged.files_key`, the
one rule for what a log directory's change is) over the directory and its files written in place,
with compaction's own two (`tombstones`, `compacted`); a keyed log's last segment's end mark (an
append supersedes keys; an unkeyed log's plan never takes its last segment, and a roll is a new
file); the protectors' pending ranges now (asked each pass: a protector may read anything); the
log's settings and policy. Beside it, the next clock-derived moment: a segment seen turns
`min_age` old, a tombstone passes `tombstone_retention`, a group goes stale (`consumer_ttl`).

Not kept (looked at every pass): a look that planned an output, failed, recorded tombstones seen
for the first time or left a segment out for want of room (free space is not in the key); an
archiving log; an in-place file within `RACY_NS` of its reading; a dry run; a look while the clock
guard holds a forward step (the caller passes no memory then). Looked at whatever the key: a clock
before the last look, or past its deadline. One memory per filesystem, used by its one compaction
at a time: not thread-safe.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from commitlog.layout import compacted_path, tombstones_path
from policies import PolicyConfig

from ..deletion.unchanged import LogKeys, tail_mark, tail_unchanged
from ..deletion.watched import WatchedLog

__all__ = ["CompactionMemory"]


@dataclass(frozen=True)
class _Looked:
    settings: tuple          # (the log's settings, its policy)
    key: tuple               # (device, files key)
    pending: tuple
    tail: tuple | None       # a keyed log's last segment's end mark
    looked_at: float
    deadline: float


class CompactionMemory:
    """What each log's last empty look was made from, and whether a pass may skip the log."""

    def __init__(self) -> None:
        self._kept: dict[str, _Looked] = {}
        self._taken: dict[str, tuple] = {}          # name -> (key, pending) taken before its look
        self._keys = LogKeys(lambda path: (tombstones_path(path), compacted_path(path)))
        self.looked = 0                             # logs looked at and skipped, counted (tests, benches)
        self.skipped = 0

    def unchanged(self, w: WatchedLog, policy: PolicyConfig, pending: Iterable[tuple[int, int]] | None,
                  now: float) -> bool:
        """True when `w`'s last look may stand at `now` (epoch s); False, with its key taken, when
        it is to be looked at. `pending`: its pending ranges now (None: they could not be had)."""
        self._taken.pop(w.name, None)
        taken = self._keys.take(w.name, w.path, time.time_ns())
        ranges = None if pending is None else tuple(tuple(r) for r in pending)
        kept = self._kept.pop(w.name, None)
        if (kept is not None and taken == kept.key and ranges == kept.pending
                and kept.settings == (w.config, policy) and kept.looked_at <= now < kept.deadline
                and (kept.tail is None or tail_unchanged(kept.tail))):
            self._kept[w.name] = kept
            self.skipped += 1
            return True
        if taken is not None and taken[1] is not None and ranges is not None and w.archive is None:
            self._taken[w.name] = (taken, ranges)
        self.looked += 1
        return False

    def remember(self, w: WatchedLog, policy: PolicyConfig, now: float, moments: Iterable[float],
                 last: tuple[str, int] | None) -> None:
        """After a look at `w` at `now` that planned nothing (nor noted tombstones, nor lacked
        room): keep it until the first of `moments` (epoch s) after `now`; `last`: a keyed log's
        last segment (path, bytes used) as the look read it."""
        taken = self._taken.pop(w.name, None)
        if taken is None:
            return
        tail = None if last is None else tail_mark(*last)
        if last is not None and tail is None:
            return
        deadline = min((m for m in moments if m > now), default=float("inf"))
        self._kept[w.name] = _Looked((w.config, policy), taken[0], taken[1], tail, now, deadline)

    def keep_only(self, names: Iterable[str]) -> None:
        """Forget the logs not among `names` (gone from the configuration)."""
        names = set(names)
        for name in [n for n in self._kept if n not in names]:
            del self._kept[name]
        self._keys.keep_only(names)
