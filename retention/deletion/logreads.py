"""Reading the watched logs for a plan: each log's snapshot, or why it has none, as the
`LogPassResult` the plan is then attached to.

`LogReads` changes nothing (`Cleaner.plan`); `PassReads` reads the logs a pass is about to clean:
it claims each log's retention first, finishes removals a crash cut short, lists no more of a log
than the plan can delete (`policies.segments_to_examine`) and seals an idle last segment
(`roll_after`). One instance per plan, on the planning thread; the disk is read once per filesystem.
"""

from __future__ import annotations

import errno
import os
from dataclasses import replace
from datetime import datetime

from loguru import logger

from commitlog import CommitLogError, LogNotReadableError
from policies import DiskSnapshot, LogSnapshot, ManualTrigger, PolicyConfig, humanize_duration, segments_to_examine

from ..archiving.cluster_cache import is_cache
from .owner import NoDescriptors, OwnedElsewhere
from .results import LogPassResult
from .watched import WatchedLog, disk_snapshot

__all__ = ["LogReads", "PassReads"]


class LogReads:
    """Reads logs whole, changing nothing."""

    forcing = False     # a disk force is under way (policies.pressure): a pass may say so
    forced: int | None = None    # the filesystem (st_dev) it is under way on; None: any read

    def __init__(self) -> None:
        self._disks: dict[int, DiskSnapshot] = {}

    def read(self, w: WatchedLog, policy: PolicyConfig, at: datetime, manual: ManualTrigger) -> LogPassResult:
        """`w` as the plan will see it under `policy` at `at`: its result, with the snapshot and
        no plan yet, or why it has no snapshot."""
        result = LogPassResult(w.name, w.path, None)
        if w.real_dir and os.path.islink(w.path):
            # Replaced since its root was read by someone who may write the root: never followed.
            result.error = f"{w.path} is a symbolic link now, where a directory was found: left alone"
            return result
        try:
            if not w.exists():
                # A cache is governed by run_pass's CopyEviction; else a writer creates it.
                if is_cache(w.path):
                    result.cache = {}
                else:
                    result.not_created = True
                return result
            snapshot = self._list(w, result, policy, at, manual)
            result.snapshot, result.not_examined_bytes, result.start_offset = snapshot, w.not_examined_bytes, w.start_seen
        except OwnedElsewhere as exc:
            result.error, result.owned_elsewhere, result.owner_pid = str(exc), True, exc.holder_pid
        except NoDescriptors as exc:
            result.error = result.no_descriptors = str(exc)
        except LogNotReadableError as exc:
            result.error = result.permission_denied = str(exc)
        except (CommitLogError, OSError) as exc:
            result.error = str(exc)
            if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):
                result.no_descriptors = f"cannot open this log for lack of file descriptors: {exc}"
        return result

    def _list(self, w: WatchedLog, result: LogPassResult, policy: PolicyConfig, at: datetime,
              manual: ManualTrigger) -> LogSnapshot:
        snapshot, result.not_examined = _snapshot(w, self._disk(w.path), False, None)
        _note_not_writable(w, result)
        return snapshot

    def disk_on(self, dev: int, path: str) -> DiskSnapshot:
        """The disk `dev` that holds `path`, read once per filesystem."""
        disk = self._disks.get(dev)
        if disk is None:
            disk = self._read_disk(path, self.forcing)
        return disk

    def _disk(self, path: str, *, again: bool = False, forcing: bool | None = None) -> DiskSnapshot:
        """The disk under `path`, read once per filesystem (`again`: read it anew; `forcing`: a disk
        force under way there, default `self.forcing`)."""
        disk = None if again else self._disks.get(os.stat(path).st_dev)
        if disk is None:
            disk = self._read_disk(path, self.forcing if forcing is None else forcing)
        return disk

    def _read_disk(self, path: str, forcing: bool) -> DiskSnapshot:
        """The disk under `path` read now, `forcing` when it is the disk forcing (`forced`)."""
        disk = disk_snapshot(path)
        if forcing and self.forced in (None, disk.filesystem_id):
            disk = replace(disk, forcing=True)
        self._disks[disk.filesystem_id] = disk
        return disk


class PassReads(LogReads):
    """Reads the logs a pass is about to clean; `forcing`: a disk force is under way on filesystem
    `forced` (None: the first read for a log not of `unforced`), no other: a log grouped with it but
    moved to another disk since (a parent swapped for a link, regrouped at the next periodic look)
    is not forced by it; the logs of `budgeted` (in a budget) are listed whole."""

    def __init__(self, forcing: bool, *, budgeted: frozenset[str] = frozenset(),
                 unforced: frozenset[str] = frozenset(), forced: int | None = None) -> None:
        super().__init__()
        self.forcing = forcing
        self.forced = forced
        self.budgeted = budgeted
        self.unforced = unforced

    def _list(self, w: WatchedLog, result: LogPassResult, policy: PolicyConfig, at: datetime,
              manual: ManualTrigger) -> LogSnapshot:
        w.claim()
        forcing = self.forcing and w.name not in self.unforced
        disk = self._disk(w.path, forcing=forcing)
        examine = segments_to_examine(policy, disk, at, manual, w.name in self.budgeted)
        snapshot, result.not_examined = _snapshot(w, disk, True, examine)
        why = _note_not_writable(w, result)
        # Before planning, so a sealed segment that is expired goes in this very pass.
        if policy.roll_after is not None and why is None and _roll(w, policy.roll_after, at):
            result.rolled = True
            disk = self._disk(w.path, again=True, forcing=forcing)   # its tail freed
            snapshot, result.not_examined = _snapshot(w, disk, False, examine)
        return snapshot


def _note_not_writable(w: WatchedLog, result: LogPassResult) -> tuple[str, bool] | None:
    """Why nothing can be deleted from `w` (and whether its user is denied), noted on `result`."""
    why = w.not_writable()
    if why is not None:
        result.not_writable = why[0]
        if why[1]:
            result.permission_denied = why[0]
    return why


def _roll(w: WatchedLog, roll_after: float, at: datetime) -> bool:
    """w.roll_if_idle, logged; a roll that fails (a read-only mount, say) is a WARNING and the
    log is planned as it is."""
    try:
        if not w.roll_if_idle(roll_after, at.timestamp()):
            return False
    except (CommitLogError, OSError) as exc:
        logger.warning("{}: could not seal its last segment by roll_after: {}", w.name, exc)
        return False
    logger.info("{}: sealed its last segment, its first record older than roll_after {}",
                w.name, humanize_duration(roll_after))
    return True


def _snapshot(w: WatchedLog, disk: DiskSnapshot, finish_interrupted: bool,
              examine: int | None) -> tuple[LogSnapshot, int]:
    for _ in range(2):
        try:
            return w.snapshot(disk, finish_interrupted=finish_interrupted, examine=examine)
        except FileNotFoundError:
            # Another process removed a segment between the listing and its stat: list again.
            logger.debug("{}: a segment went away while listing; listing again", w.name)
    return w.snapshot(disk, finish_interrupted=finish_interrupted, examine=examine)
