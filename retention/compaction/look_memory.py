"""Change-driven compaction: a log whose last look found nothing to compact, and none of whose
inputs to compaction can have changed since, is not looked at again (not listed, opened or read);
its part of the pass is the empty one that look gave (docs: operations.md, "Change-driven passes").

Its key, taken before the look: the deletion pass's (`retention.deletion.log_keys.files_key`) with
compaction's `tombstones` and `compacted` (an unkeyed log without a marks file, which has nothing
to drop: its directory's identity and that absence); a keyed log's last segment's end mark; the pending
ranges (asked after the clean mark); the log's settings and policy. Beside it, the next
clock-derived moment (`min_age`, `tombstone_retention`, a group going stale). With the roll watch's
dirty marks (`.changes`) a log no event marked dirty since its key was taken (under the same clean
mark) is compared by its remembered key, no `stat`s, every `COMPACTION_FULL_CHECK` keyed anyway.
`carried`, from one read of the clean marks, names the logs not looked at one by one at all (no
`WatchedLog`, no pending ranges asked): kept, unkeyed (a keyed log's tail is written through its
mapping, which raises no event), clean under their mark, the same settings objects, before their
deadline, and only when every protector's answers are decided in the log directory. Not kept: a
look that planned an output, failed, recorded tombstones seen first, or lacked room; an archiving
log; a file within `RACY_NS` of its reading; a dry run; a clock guard's held step. Looked at
whatever the key: a clock before the last look, or past its deadline. One memory per filesystem,
used by its one compaction at a time: not thread-safe.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from commitlog.layout import compacted_path, marks_path, tombstones_path
from policies import PolicyConfig, RetentionConfig

from ..deletion.changes import ChangeMarks, Reader
from ..deletion.log_keys import LogKeys
from ..deletion.unchanged import tail_mark, tail_unchanged
from ..deletion.watched import WatchedLog

__all__ = ["CompactionMemory", "has_marks_file"]

_MARKLESS = "no marks file"     # in the key of an unkeyed log without one: nothing in it can be dropped


@dataclass(frozen=True)
class _Looked:
    path: str                # the log's directory
    settings: tuple          # (the log's settings, its policy)
    key: tuple               # (device, files key)
    pending: tuple
    tail: tuple | None       # a keyed log's last segment's end mark
    looked_at: float
    deadline: float
    clean: float | None      # the clean mark (`ChangeMarks.since`) its key was taken under, if any


class CompactionMemory:
    """What each log's last empty look was made from, and whether a pass may skip the log."""

    def __init__(self) -> None:
        self._kept: dict[str, _Looked] = {}
        self._taken: dict[str, tuple] = {}          # name -> (key, pending, clean mark) before its look
        self._keys = LogKeys(lambda path: (tombstones_path(path), compacted_path(path)))
        self.looked = 0                             # logs looked at (tests, benches)
        self.skipped = 0                            # logs whose kept look stood, asked one by one
        self.carried_logs = 0                       # logs carried by `carried`, not asked one by one
        self.keyed = 0                              # keys taken by stats, counted (tests, benches)
        self.changes: ChangeMarks | None = None     # inotify's dirty marks (set by the scheduler), if any

    def carried(self, config: RetentionConfig, names: Iterable[str], now: float) -> set[str]:
        """The names among `names` whose last empty look stands at `now` (epoch s) unlooked (see the
        module docstring); the caller has made sure that only files in a log's directory decide
        its pending ranges. Empty without dirty marks."""
        if self.changes is None:
            return set()
        mono, clean = self.changes.clean(Reader.COMPACTION)
        stale = mono - Reader.COMPACTION.full_check
        kept_of, logs, policy_for = self._kept, config.logs, config.policy_for
        carried = set()
        for name in names:
            kept = kept_of.get(name)
            if kept is None or kept.tail is not None or not kept.looked_at <= now < kept.deadline:
                continue
            since = clean.get(kept.path)
            if since is None or since != kept.clean or since <= stale:
                continue
            log_config, policy = kept.settings
            if logs.get(name) is log_config and policy_for(name) is policy:
                carried.add(name)
        self.carried_logs += len(carried)
        return carried

    def unchanged(self, w: WatchedLog, policy: PolicyConfig,
                  pending: Callable[[], Iterable[tuple[int, int]] | None], now: float) -> bool:
        """True when `w`'s last look may stand at `now` (epoch s); False, with its key taken, when
        it is to be looked at. `pending()`: its pending ranges now (None: they could not be had),
        asked after its directory is marked clean, so that a change to them after marks it dirty."""
        self._taken.pop(w.name, None)
        kept = self._kept.pop(w.name, None)
        fresh = self._fresh(w.path)
        # The clean mark the key is taken under (set before it is read); a remembered key stands
        # unread only under its own (the path's mark cleaned by another log's key does not count).
        since = self.changes.since(w.path, Reader.COMPACTION) if self.changes is not None else None
        clean = fresh and kept is not None and since is not None and kept.clean == since
        taken = kept.key if clean else self._take(w, not policy.compaction.keys)
        # Pending ranges keep records from being dropped: a log without marks has none to drop,
        # and is not asked (a Spark log's ledger opened makes and removes its WAL: a dirty mark).
        found = () if _markless(taken) else pending()
        ranges = None if found is None else tuple(tuple(r) for r in found)
        settings = (w.config, policy)
        if (kept is not None and taken == kept.key and ranges == kept.pending
                and kept.settings == settings and kept.looked_at <= now < kept.deadline
                and (kept.tail is None or tail_unchanged(kept.tail))):
            # Its settings' objects now, equal to those kept: after a reload it may be carried again.
            self._kept[w.name] = replace(kept, settings=settings, clean=since)
            self.skipped += 1
            return True
        if taken is not None and taken[1] is not None and ranges is not None and w.archive is None:
            self._taken[w.name] = (taken, ranges, since)
        self.looked += 1
        return False

    def _fresh(self, path: str) -> bool:
        """Whether no event marked `path` dirty since its key was last taken (marked clean now,
        before its key is read, when not)."""
        return self.changes is not None and self.changes.fresh(path, Reader.COMPACTION)

    def _take(self, w: WatchedLog, unkeyed: bool) -> tuple | None:
        self.keyed += 1
        taken = (_markless_key(w.path) if unkeyed else None) or self._keys.take(w.name, w.path, time.time_ns())
        if self.changes is not None and taken is not None and taken[1] is not None:
            self.changes.seen(w.path, taken[0], taken[1][0])     # the directory its watch is on?
        return taken

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
        self._kept[w.name] = _Looked(w.path, (w.config, policy), taken[0], taken[1], tail, now, deadline, taken[2])

    def keep_only(self, names: Iterable[str]) -> None:
        """Forget the logs not among `names` (gone from the configuration)."""
        names = set(names)
        for name in [n for n in self._kept if n not in names]:
            del self._kept[name]
        self._keys.keep_only(names)


def has_marks_file(path: str) -> bool:
    """Whether log directory `path` has a marks file, a link included; any error but its absence
    raises (unlike `os.path.lexists`): a log whose marks file cannot be looked at is that log's error."""
    try:
        os.lstat(marks_path(path))
    except FileNotFoundError:
        return False
    return True


def _markless(key: tuple | None) -> bool:
    return key is not None and key[1] is not None and key[1][-1] == _MARKLESS


def _markless_key(path: str) -> tuple | None:
    """An unkeyed log's key while it has no marks file, which is all its look depends on (the look
    plans nothing without one): its directory's identity and ownership (the roll watch's `seen`
    compares the identity) and that absence, two `stat`s where the full key lists and `stat`s every
    entry. None when it has one or either cannot be read: the full key is taken (and says so)."""
    try:
        st = os.stat(path)
        if has_marks_file(path):
            return None
    except OSError:
        return None
    return st.st_dev, (st.st_ino, st.st_mode, st.st_uid, st.st_gid, _MARKLESS)
