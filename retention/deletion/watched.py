"""Taking the planner's input from the real world: segments, consumer offsets, disk usage, hung state.

This is where retention reads the store and the filesystem; `policies` then decides from the plain
data returned here without touching either.
"""

from __future__ import annotations

import os
import time

from commitlog import ROLLED, CommitLog, SegmentInfo, disk_usage, is_log_directory, list_segments, roll_idle
from commitlog.access import on_readonly_filesystem, unreadable, unwritable
from commitlog.archive import Manifest, cached_manifest
from commitlog.archive.identity import BootMark, read_state, trusted_manifest
from commitlog.layout import archive_manifest_path, index_path
from policies import DiskSnapshot, GroupSnapshot, LogConfig, LogSnapshot, SegmentSnapshot, trust_window, up_window

from . import owner
from .hung import HungRegistry


def disk_snapshot(path: str, *, forcing: bool = False) -> DiskSnapshot:
    """Usage of the filesystem holding `path`, as df shows it (the store's statvfs reader, the one
    the writers' disk guard uses); `forcing`: a disk force is under way there."""
    usage = disk_usage(path)
    return DiskSnapshot(usage.filesystem_id, usage.total_bytes, usage.used_bytes, usage.free_bytes, forcing)


def group_snapshots(log: CommitLog) -> tuple[GroupSnapshot, ...]:
    """The consumer groups of `log` as the planners see them: committed offset, last commit time."""
    times = log.commit_times()
    return tuple(GroupSnapshot(g, off, times.get(g, 0.0)) for g, off in log.committed().items())


def _archived_at(manifest: Manifest | None, base: int, end: int) -> float | None:
    """Epoch seconds since which `manifest` lists the segment of these offsets whole, or None."""
    if manifest is None or not manifest.covers(base, end):
        return None
    return manifest.find(base).archived_at_ms / 1000


def _allocated(path: str) -> int:
    """Bytes the file at `path` takes on disk (its blocks), 0 when it is missing."""
    try:
        return os.stat(path).st_blocks * 512
    except FileNotFoundError:
        return 0


class WatchedLog:
    """A configured log as the cleaner sees it: opened read-only on first use (the sidecar is never
    the writer), with its hung-segment registry. Not thread-safe: one pass uses it at a time."""

    def __init__(self, name: str, config: LogConfig, *, archive=None, real_dir: bool = False,
                 opened: set[str] | None = None) -> None:
        self.name = name
        self._opened = opened if opened is not None else set()   # shared: the names of its owner's open logs
        self.real_dir = real_dir    # found by `discover`: its path must stay a real directory, never a link
        self.config = config
        self.archive = archive if archive is not None and archive.enabled else None   # its ArchiveConfig
        self.archive_doubt: str | None = None  # why the last snapshot trusted nothing the tier lists
        self.archive_until: float | None = None  # when (epoch s) that trust or the tier's being up may lapse
        self.path = str(config.path)
        self._log: CommitLog | None = None
        self._hung: HungRegistry | None = None
        self.start_seen: int | None = None    # the start offset the last snapshot saw
        self.last_seen: SegmentInfo | None = None  # the log's last segment as that snapshot saw it
        self._claim: str | None = None         # this process's retention ownership (retention.deletion.owner)
        self.not_examined_bytes = 0                # bytes of the segments the last snapshot did not examine
        self._not_examined_seen: tuple | None = None   # ((directory mtime_ns, listed, examined), their bytes)
        self._manifest_seen: tuple[tuple, Manifest | None] | None = None  # ((inode, mtime_ns) of the copy, it)

    def claim(self) -> None:
        """Become (or stay) the log's retention owner, until `close`; OwnedElsewhere when another
        process is. A log that cannot be locked (read-only, gone) is passed as it is."""
        if self._claim is None:
            self._claim = owner.claim(self.path)

    @property
    def claimed(self) -> bool:
        """This process owns the log's retention (claimed, not closed since)."""
        return self._claim is not None

    def exists(self) -> bool:
        """A log directory, or one this process may not read (its open says "permission denied"):
        either way not a log a writer has yet to create."""
        return is_log_directory(self.path) or unreadable(self.path) is not None

    def not_writable(self) -> tuple[str, bool] | None:
        """(why this process can delete nothing from the log, whether permissions are the cause
        rather than a read-only filesystem); None when it can. A few syscalls, asked each pass."""
        why = unwritable(self.path)
        if why is None:
            return None
        return (f"log {self.path} cannot be written: {why}: it is planned and read, nothing is deleted",
                not on_readonly_filesystem(self.path))

    @property
    def log(self) -> CommitLog:
        if self._log is None:
            # An explicit segment_size in the file must match the log's; an omitted one is not checked.
            explicit = "segment_size" in self.config.model_fields_set
            self._log = CommitLog.open(self.path, self.config.segment_size if explicit else None,
                                       readonly=True)
            self._opened.add(self.name)
        return self._log

    @property
    def hung(self) -> HungRegistry:
        if self._hung is None:
            self._hung = HungRegistry(self.path)
        return self._hung

    def snapshot(self, disk: DiskSnapshot | None = None, *, finish_interrupted: bool = False,
                 examine: int | None = None) -> tuple[LogSnapshot, int]:
        """The log as the planner sees it now, from the store's listing (one scan of the directory);
        returns the snapshot and how many segments it leaves out.

        finish_interrupted: first complete removals a crash cut short (leftover `.deleted` files,
        segments below the start offset). examine: stat and include only the oldest `examine`
        segments and the active one; a pass can delete no more than files_per_pass and stops at
        the first segment it keeps, so it needs no more (Kafka's walker, not a full listing of
        100,000 stats). Raises CorruptLogError for a segment-named regular file of the wrong size,
        so a pass deletes nothing from a log it does not understand (a compacted segment, smaller,
        is one it understands)."""
        log = self.log
        start = log.start_offset
        listing = list_segments(self.path, stat_head=examine, stat_last=True, start_offset=start)
        if listing.interrupted and finish_interrupted:
            log.finish_removals()
            start = log.start_offset
            listing = list_segments(self.path, stat_head=examine, stat_last=True, start_offset=start)
        bases = listing.bases
        chosen = listing.statted if examine is not None else listing.segments
        not_examined = len(bases) - len(chosen)
        self.not_examined_bytes = self._bytes_of_unexamined(listing, chosen) if not_examined else 0
        segments = []
        self.last_seen = None
        manifest, archive_up = self._trusted()
        last = len(chosen) - 1
        covered = -1  # the end of the segment before: a base below it is a swap's leftover
        for i, seg in enumerate(chosen):
            is_last = i == last and seg.base_offset == bases[-1]
            if seg.base_offset < covered:
                continue  # superseded by the compacted segment before it; removed with it
            # A segment of another size than segment_size must be complete, a compaction's output
            # or a time-based roll's (or the newest, still empty): segment_info raises
            # CorruptLogError otherwise, and nothing is deleted.
            info = log.segment_info(seg.base_offset, last=is_last)
            if is_last:
                self.last_seen = info
            # Its own end, not the next base: a compaction may have left a gap between them.
            segments.append(SegmentSnapshot(seg.base_offset, info.end_offset, seg.path, info.size,
                                            info.mtime, is_last and info.active, info.used_bytes,
                                            info.live_bytes,
                                            _allocated(index_path(seg.path)) if not info.active else 0,
                                            sealed=is_last and not info.active,
                                            archived_at=_archived_at(manifest, seg.base_offset, info.end_offset)))
            covered = info.end_offset
        groups = group_snapshots(log)
        hung = self.hung
        hung.forget_below(start)
        self.start_seen = start
        snap = LogSnapshot(self.name, self.path, self.config.policy, tuple(segments), groups,
                           disk or disk_snapshot(self.path), hung.snapshot(), archive_up=archive_up,
                           archive_doubt=self.archive_doubt)
        return snap, not_examined

    def _trusted(self) -> tuple[Manifest | None, bool]:
        """What eviction may take as archived now (`commitlog.archive.identity.trusted_manifest`)
        and whether the tier is up; None, False without an archive."""
        if self.archive is None:
            return None, False
        state, now, url = read_state(self.path), BootMark.now(), self.archive.url
        within = trust_window(self.archive)
        manifest, self.archive_doubt = trusted_manifest(self.archived(), state, now=now, url=url, within_s=within)
        age = state.age_s(now)
        self.archive_until = None if age is None else time.time() + min(within, up_window(self.archive)) - age
        return manifest, state.up(now, up_window(self.archive), url)

    def archived(self) -> Manifest | None:
        """The log's archive manifest as this host last saw it (its uploads refresh the copy), read
        again only when the copy changed."""
        try:
            st = os.stat(archive_manifest_path(self.path))
            changed = (st.st_ino, st.st_mtime_ns)
        except FileNotFoundError:
            return None
        if self._manifest_seen is None or self._manifest_seen[0] != changed:
            self._manifest_seen = (changed, cached_manifest(self.path, self.name))
        return self._manifest_seen[1]

    def _bytes_of_unexamined(self, listing, chosen) -> int:
        """The bytes of the segments a pass leaves out, which may be short (compacted or time-rolled),
        so /status counts them as they are. A stat each, unless the directory is unchanged since they
        were counted: a sealed segment changes size only as a new file (a compaction's rename) or
        the last one (always statted), and either changes the directory's mtime. Like git's racily
        clean files, a directory changed within a second of the count is counted again."""
        try:
            before = os.stat(self.path).st_mtime_ns
        except FileNotFoundError:
            return 0
        # Same directory mtime: the same names, so the same unexamined segments (cheap to compare).
        key = (before, len(listing.segments), len(chosen))
        seen = self._not_examined_seen
        if seen is not None and seen[0] == key:
            return seen[1]
        examined = {seg.base_offset for seg in chosen}
        unexamined = [seg for seg in listing.segments if seg.base_offset not in examined]
        total = 0
        for seg in unexamined:
            try:
                total += os.stat(seg.path).st_size
            except FileNotFoundError:
                pass   # removed since the listing: it takes nothing
        if time.time_ns() - before > 1_000_000_000:
            self._not_examined_seen = (key, total)
        return total

    def roll_if_idle(self, roll_after: float, now: float) -> bool:
        """Seal the last segment short when the last snapshot found its first record `roll_after`
        seconds old at `now` and no writer has the log open (commitlog.roll_idle; an open writer
        rolls by its own roll_after). True when it sealed (snapshot again to see it). A log with
        nothing due costs nothing more than its snapshot."""
        info = self.last_seen
        if info is None or not info.active or not info.record_count \
                or info.first_timestamp_ms / 1000 + roll_after > now:
            return False
        return roll_idle(self.path, roll_after, now_ns=int(now * 1e9)) == ROLLED

    def release_if_tight(self) -> None:
        """`release_log` while claims hold half the descriptors (`owner.tight`): an open each on
        top of every claim may not fit, so each log is let go as soon as it has been read."""
        if owner.tight():
            self.release_log()

    def release_log(self) -> None:
        """Close the read-only open of the log (its descriptor), keeping the claim: reopened when
        next read."""
        if self._log is not None:
            self._log.close()
            self._log = None
        self._opened.discard(self.name)

    def close(self) -> None:
        if self._claim is not None:
            owner.release(self._claim)
            self._claim = None
        self.release_log()
