"""Taking the planner's input from the real world: segments, consumer offsets, disk usage, hung state.

This is where retention reads the store and the filesystem; `policies` then decides from the plain
data returned here without touching either.
"""

from __future__ import annotations

import os

import psutil

from commitlog import CommitLog, CorruptLogError, parse_segment_name
from policies import DiskSnapshot, GroupSnapshot, LogConfig, LogSnapshot, SegmentSnapshot

from .hung import HungRegistry


def disk_snapshot(path: str) -> DiskSnapshot:
    """Usage of the filesystem holding `path`, as df shows it (psutil reads statvfs)."""
    usage = psutil.disk_usage(path)
    return DiskSnapshot(os.stat(path).st_dev, usage.total, usage.used, usage.free)


class WatchedLog:
    """A configured log as the cleaner sees it: opened read-only on first use (the sidecar is never
    the writer), with its hung-segment registry. Not thread-safe: one pass uses it at a time."""

    def __init__(self, name: str, config: LogConfig) -> None:
        self.name = name
        self.config = config
        self.path = str(config.path)
        self._log: CommitLog | None = None
        self._hung: HungRegistry | None = None

    def exists(self) -> bool:
        return os.path.isfile(os.path.join(self.path, "meta.json"))

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

    def snapshot(self, disk: DiskSnapshot | None = None) -> LogSnapshot:
        """The log as the planner sees it now. Raises CorruptLogError for a segment-named regular
        file of the wrong size, so a pass deletes nothing from a log it does not understand."""
        log = self.log
        start = log.start_offset
        files = []
        with os.scandir(self.path) as it:
            for entry in it:
                base = parse_segment_name(entry.name)
                # Symlinks and directories posing as segments are never segments: left alone.
                if base is None or not entry.is_file(follow_symlinks=False):
                    continue
                st = entry.stat(follow_symlinks=False)
                files.append((base, entry.path, st.st_size, st.st_mtime))
        files.sort()
        while len(files) > 1 and files[1][0] <= start:
            files.pop(0)  # logically removed already; the next removal finishes it
        end = log.end_offset
        segments = []
        for i, (base, path, size, mtime) in enumerate(files):
            last = i == len(files) - 1
            if size != log.segment_size and not (last and size == 0):
                raise CorruptLogError(path, None, f"segment-named file is {size} bytes, expected "
                                      f"{log.segment_size}; nothing is deleted from this log")
            segments.append(SegmentSnapshot(base, end if last else files[i + 1][0], path, size,
                                            mtime, last))
        times = log.commit_times()
        groups = tuple(GroupSnapshot(g, off, times.get(g, 0.0)) for g, off in log.committed().items())
        hung = self.hung
        hung.forget_below(start)
        return LogSnapshot(self.name, self.path, self.config.policy, tuple(segments), groups,
                           disk or disk_snapshot(self.path), hung.snapshot())

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
