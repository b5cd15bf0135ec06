"""Taking the planner's input from the real world: segments, consumer offsets, disk usage, hung state.

This is where retention reads the store and the filesystem; `policies` then decides from the plain
data returned here without touching either.
"""

from __future__ import annotations

import os

from commitlog import DELETED_SUFFIX, CommitLog, CorruptLogError, disk_usage, parse_segment_name
from policies import DiskSnapshot, GroupSnapshot, LogConfig, LogSnapshot, SegmentSnapshot

from .hung import HungRegistry


def _base_of(item: tuple[int, os.DirEntry]) -> int:
    return item[0]


def disk_snapshot(path: str, *, forcing: bool = False) -> DiskSnapshot:
    """Usage of the filesystem holding `path`, as df shows it (the store's statvfs reader, the one
    the writers' disk guard uses); `forcing`: a disk force is under way there."""
    usage = disk_usage(path)
    return DiskSnapshot(usage.filesystem_id, usage.total_bytes, usage.used_bytes, usage.free_bytes, forcing)


def log_exists(path: str) -> bool:
    """True when `path` holds a commit log (its metadata file exists)."""
    return os.path.isfile(os.path.join(path, "meta.json"))


class WatchedLog:
    """A configured log as the cleaner sees it: opened read-only on first use (the sidecar is never
    the writer), with its hung-segment registry. Not thread-safe: one pass uses it at a time."""

    def __init__(self, name: str, config: LogConfig) -> None:
        self.name = name
        self.config = config
        self.path = str(config.path)
        self._log: CommitLog | None = None
        self._hung: HungRegistry | None = None
        self.start_seen: int | None = None    # the start offset the last snapshot saw

    def exists(self) -> bool:
        return log_exists(self.path)

    @property
    def log(self) -> CommitLog:
        if self._log is None:
            # An explicit segment_size in the file must match the log's; an omitted one is not checked.
            explicit = "segment_size" in self.config.model_fields_set
            self._log = CommitLog.open(self.path, self.config.segment_size if explicit else None,
                                       readonly=True)
        return self._log

    @property
    def hung(self) -> HungRegistry:
        if self._hung is None:
            self._hung = HungRegistry(self.path)
        return self._hung

    def snapshot(self, disk: DiskSnapshot | None = None, *, finish_interrupted: bool = False,
                 examine: int | None = None) -> tuple[LogSnapshot, int]:
        """The log as the planner sees it now, from one directory listing; returns the snapshot
        and how many segments it leaves out.

        finish_interrupted: first complete removals a crash cut short (leftover `.deleted` files,
        segments below the start offset). examine: stat and include only the oldest `examine`
        segments and the active one; a pass can delete no more than files_per_pass and stops at
        the first segment it keeps, so it needs no more (Kafka's walker, not a full listing of
        100,000 stats). Raises CorruptLogError for a segment-named regular file of the wrong size,
        so a pass deletes nothing from a log it does not understand."""
        log = self.log
        start = log.start_offset
        entries, leftovers = self._list(start)
        if leftovers and finish_interrupted:
            log.finish_removals()
            start = log.start_offset
            entries, _ = self._list(start)
        while len(entries) > 1 and entries[1][0] <= start:
            entries.pop(0)  # logically removed already; the next removal finishes it
        left_out = 0
        if examine is not None and len(entries) > examine + 1:
            left_out = len(entries) - examine - 1
            chosen = entries[:examine] + entries[-1:]
        else:
            chosen = entries
        end = log.segment_end_offset(entries[-1][0]) if entries else start
        segments = []
        expected = log.segment_size
        last = len(chosen) - 1
        for i, (base, entry) in enumerate(chosen):
            st = entry.stat(follow_symlinks=False)
            if st.st_size != expected and not (i == last and st.st_size == 0):
                raise CorruptLogError(entry.path, None, f"segment-named file is {st.st_size} bytes, "
                                      f"expected {expected}; nothing is deleted from this log")
            if i == last:
                seg_end = end
            else:
                # The next segment in the log, not in `chosen`: the left-out ones are still there.
                seg_end = entries[i + 1][0] if i + 1 < len(entries) else end
            segments.append(SegmentSnapshot(base, seg_end, entry.path, st.st_size, st.st_mtime, i == last))
        times = log.commit_times()
        groups = tuple(GroupSnapshot(g, off, times.get(g, 0.0)) for g, off in log.committed().items())
        hung = self.hung
        hung.forget_below(start)
        self.start_seen = start
        snap = LogSnapshot(self.name, self.path, self.config.policy, tuple(segments), groups,
                           disk or disk_snapshot(self.path), hung.snapshot())
        return snap, left_out

    def _list(self, start: int) -> tuple[list[tuple[int, os.DirEntry]], bool]:
        """(segment entries as (base, entry) oldest first, whether interrupted removals remain)."""
        entries = []
        leftovers = False
        with os.scandir(self.path) as it:
            for entry in it:
                name = entry.name
                base = parse_segment_name(name)
                if base is None:
                    leftovers = leftovers or name.endswith(DELETED_SUFFIX)
                    continue
                # Symlinks and directories posing as segments are never segments: left alone.
                if entry.is_file(follow_symlinks=False):
                    entries.append((base, entry))
        entries.sort(key=_base_of)
        leftovers = leftovers or (len(entries) > 1 and entries[1][0] <= start)
        return entries, leftovers

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
