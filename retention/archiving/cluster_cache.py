"""Each host's sidecar governs its caches of cluster logs: a configured log whose directory holds
`cluster-cache.json` (commitlog.archive.local_copies) is a cache of its tier, not a missing log.

At the start of every pass (`Cleaner.run_pass`, before any log is planned, so under disk pressure
a cache goes before any local log's data), `CopyEviction.run` lists the cache's files
(`cache/<key>`, and the `.tmp` files and private logs of tasks), reads the tier's newest
manifest version (the marker names the tier), and evicts what `policies.cache_eviction` lets go:
listed copies under the log's policy (time by the entry's `archived_at_ms`, size by
`retention_bytes`, disk pressure), unlisted ones once older than the commit deadline plus
UNLISTED_MARGIN. A tier that cannot be read makes every copy count as listed since its mtime
(every copy was uploaded and verified before it was kept, so none is the only one).

Audited as evictions are: an `evict-copy` intent (fsynced), the unlink, a `deleted` outcome with
`archived: true`, `copy: true`, the triggers and `because` (`expired`, `size-cap`, a disk trigger or
`unlisted`). An intent whose process died is settled at the next run (`deleted`, recovered, when
the file is gone; else `aborted`, `not-removed`). A cache is never uploaded: the copies came from
the tier. Not thread-safe per cache: the cleaner's pass lock serialises runs.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

from loguru import logger

from commitlog.archive import local_copies, open_tier, versions
from commitlog.errors import ArchiveError, CommitLogError, UnsafeLogFileError
from commitlog.layout import CLUSTER_CACHE_DIR, TMP_SUFFIX, cluster_cache_file, meta_path
from commitlog.archive.job_claims import DEFAULT_COMMIT_TIMEOUT
from policies import NO_MANUAL_TRIGGER, ManualTrigger, PolicyConfig, active_triggers
from policies.cache_eviction import CachedCopy, evict_copies

from ..audit import AbortedEntry, AbortReason, AuditTrail, CopyEvictionEntry, Event, IntentAction
from ..deletion.watched import disk_snapshot

__all__ = ["EVICT_COPY", "UNLISTED_MARGIN", "CopyEviction", "is_cache"]

EVICT_COPY = IntentAction.EVICT_COPY  # the audit intent's action
UNLISTED_MARGIN = 600.0               # seconds past the commit deadline before an unlisted copy goes


def is_cache(path: str) -> bool:
    """Whether the configured log's directory is a cluster log's cache (and no log of its own):
    its marker a regular file, never a link followed."""
    try:
        marker = os.lstat(cluster_cache_file(path))
    except OSError:
        return False
    return stat.S_ISREG(marker.st_mode) and not os.path.lexists(meta_path(path))


@dataclass(frozen=True)
class _File:
    copy: CachedCopy
    path: str
    tree: bool                        # a private log's directory (removed whole)


def _listing(path: str) -> list[_File]:
    """The cache's files: each copy, each `.tmp` file, each `.tmp` directory whole (its newest mtime)."""
    root = os.path.join(path, CLUSTER_CACHE_DIR)
    found: list[_File] = []
    try:
        if not stat.S_ISDIR(os.lstat(root).st_mode):     # a link planted at cache/ is never walked
            raise UnsafeLogFileError(root, "not a directory (a symbolic link?)")
    except FileNotFoundError:
        return found
    for folder, dirs, files in os.walk(root):
        for d in [d for d in dirs if d.endswith(TMP_SUFFIX)]:
            dirs.remove(d)
            whole = os.path.join(folder, d)
            sizes = [(st.st_blocks * 512, st.st_mtime) for st in _stats(whole)]
            found.append(_File(CachedCopy(os.path.relpath(whole, root), sum(s for s, _ in sizes),
                                          max((m for _, m in sizes), default=os.lstat(whole).st_mtime), None),
                               whole, True))
        for name in files:
            full = os.path.join(folder, name)
            st = os.lstat(full)
            if stat.S_ISREG(st.st_mode):
                found.append(_File(CachedCopy(os.path.relpath(full, root), st.st_blocks * 512, st.st_mtime, None),
                                   full, False))
    return found


def _stats(tree: str) -> list[os.stat_result]:
    out = []
    for folder, _, files in os.walk(tree):
        for name in files:
            try:
                out.append(os.lstat(os.path.join(folder, name)))
            except FileNotFoundError:
                pass
    return out


def _remove_below(root: str, key: str, tree: bool) -> None:
    """Remove `root/key` (a file, or a directory whole) through directory descriptors opened with
    O_NOFOLLOW from `root` down: a directory on the way swapped for a link since the listing
    fails the removal (ELOOP/ENOTDIR) instead of reaching outside the cache."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    fd = os.open(root, flags)
    try:
        *folders, last = key.split(os.sep)
        for folder in folders:
            inner = os.open(folder, flags, dir_fd=fd)
            os.close(fd)
            fd = inner
        if tree:
            shutil.rmtree(last, dir_fd=fd)         # fd-based: it never follows a link inside
        else:
            os.unlink(last, dir_fd=fd)
    finally:
        os.close(fd)


class CopyEviction:
    """Evicts the copies of the caches a cleaner watches (see the module docstring)."""

    def __init__(self, audit: AuditTrail, clock: Callable[[], float],
                 unlisted_after: float = DEFAULT_COMMIT_TIMEOUT + UNLISTED_MARGIN) -> None:
        self.audit = audit
        self._clock = clock
        self.unlisted_after = unlisted_after

    def run(self, name: str, path: str, policy: PolicyConfig, at: datetime, *, forcing: bool = False,
            manual: ManualTrigger = NO_MANUAL_TRIGGER) -> dict:
        """One pass over the cache of log `name` at `path`: {"copies", "bytes", "evicted",
        "freed_bytes"[, "error"]}."""
        self._settle(name, path)
        try:
            files = _listing(path)
            if not files:
                return {"copies": 0, "bytes": 0, "evicted": 0, "freed_bytes": 0}
            url, files = self._listed(path, files)
            disk = disk_snapshot(path, forcing=forcing)
        except (OSError, CommitLogError) as exc:
            logger.error("{}: cache {} not governed this pass: {}", name, path, exc)
            return {"copies": 0, "bytes": 0, "evicted": 0, "freed_bytes": 0, "error": str(exc)}
        triggers = active_triggers(policy, disk.used_ratio, at, manual, forcing)
        chosen = evict_copies([f.copy for f in files], policy=policy, triggers=triggers,
                              used_bytes=disk.used_bytes, total_bytes=disk.total_bytes, now=at.timestamp(),
                              unlisted_after=self.unlisted_after)
        by_key = {f.copy.key: f for f in files}
        freed = evicted = 0
        for copy, why in chosen:
            if self._evict(name, url, by_key[copy.key], list(triggers), why):
                evicted += 1
                freed += copy.bytes
        if evicted:
            logger.info("{}: evicted {} cached cop{} ({} bytes) from {}", name, evicted,
                        "y" if evicted == 1 else "ies", freed, path)
        return {"copies": len(files), "bytes": sum(f.copy.bytes for f in files), "evicted": evicted,
                "freed_bytes": freed}

    def _listed(self, path: str, files: list[_File]) -> tuple[str, list[_File]]:
        """The tier's URL and `files` with the archived time of those the newest version lists."""
        marker = local_copies.read_marker(path)
        try:
            found = versions.newest(open_tier(marker.url, endpoint=marker.endpoint, region=marker.region),
                                    marker.log)
        except ArchiveError as exc:
            logger.warning("{}: the tier of cache {} cannot be read ({}): every copy counts as listed",
                           marker.log, path, exc)
            return marker.url, [_File(CachedCopy(f.copy.key, f.copy.bytes, f.copy.mtime, f.copy.mtime), f.path,
                                      f.tree) for f in files]
        listed = {}
        for s in found[1].segments if found is not None else ():
            listed[s.data_file] = listed[s.index_file] = s.archived_at_ms / 1000
        return marker.url, [_File(CachedCopy(f.copy.key, f.copy.bytes, f.copy.mtime, listed.get(f.copy.key)),
                                  f.path, f.tree) for f in files]

    def _evict(self, name: str, url: str, f: _File, triggers: list[str], why: str) -> bool:
        planned = CopyEvictionEntry(time=self._clock(), log=name, path=f.path, segment=f.copy.key, base_offset=None,
                                    end_offset=None, bytes=f.copy.bytes, triggers=triggers, because=why,
                                    archived=True, copy=True, archive=url)
        try:
            ident = self.audit.intent(IntentAction.EVICT_COPY, planned)
        except OSError as exc:
            logger.error("{}: not evicting {}: its audit intent cannot be written ({})", name, f.path, exc)
            return False
        try:
            _remove_below(f.path[:-len(f.copy.key) - 1], f.copy.key, f.tree)     # cache/ and the key
        except FileNotFoundError:
            pass
        except OSError as exc:
            logger.error("{}: evicting {} failed: {}", name, f.path, exc)
            self.audit.outcome_or_log(ident, Event.ABORTED, AbortedEntry.of(planned, self._clock(), AbortReason.ERROR))
            return False
        self.audit.outcome_or_log(ident, Event.DELETED, replace(planned, time=self._clock()))
        return True

    def _settle(self, name: str, path: str) -> None:
        """The outcome of an eviction of this cache whose process died."""
        prefix = os.path.join(path, CLUSTER_CACHE_DIR) + os.sep
        for intent in self.audit.unresolved():
            if intent.get("action") != EVICT_COPY or not str(intent.get("path", "")).startswith(prefix):
                continue
            if os.path.lexists(intent["path"]):
                self.audit.outcome_or_log(intent["id"], Event.ABORTED,
                                          AbortedEntry.of(intent, self._clock(), AbortReason.NOT_REMOVED),
                                          recovered=True)
            else:
                self.audit.outcome_or_log(intent["id"], Event.DELETED, CopyEvictionEntry.of(intent, self._clock()),
                                          recovered=True)
            logger.warning("{}: settled the audit intent of an interrupted eviction of {}", name, intent["path"])
