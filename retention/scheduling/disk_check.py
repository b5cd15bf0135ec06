"""The disk check: the job that runs every `disk_check_interval` (a second by default) and looks
at the clock, at where the logs live, and at each filesystem's use; and the segment-roll watch
(inotify, `service.watch_rolls`) that checks a filesystem at once when a segment rolls there, and
whose dirty marks the cleaners' passes follow (`retention.deletion.changes`).

`DiskCheck.run` is the job; the scheduler calls `watch` after every change of its filesystems and
`close` when it stops. Runs on the scheduler's job thread; `watch` and `close` are called under the
scheduler's apply lock.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from loguru import logger

from ..deletion.changes import ChangeMarks
from .checkup import HealthCheck
from .filesystems import MountTable, dev_of, log_devs
from .pressure_watch import PressureWatch
from .rollwatch import RollWatch
from .scheduler_state import SchedulerState

__all__ = ["DiskCheck"]

# Seconds between two looks at a log directory for a move to another filesystem when no mount
# changed: the safety net for a moved directory no mount made (a parent swapped for a link to
# another disk), as long as the deletion marks' full check. A `stat` of each log, spread over the
# checks: 10,000 of them at once cost 20 ms with a warm dentry cache and 150 ms in an idle sidecar's.
REGROUP_EVERY = 300.0
# A mount or unmount in the process's namespace is looked at by the next check, and once more a
# MOUNT_GAP later (an unmount may be told before its tree is detached); at most one such look a
# MOUNT_GAP, so a host whose containers mount and unmount all the time costs no more than a look
# every 10 s did.
MOUNT_GAP = 10.0
# A look a mount change made marks every log dirty (the next pass keys each: at 10,000 logs about
# 0.3 s) at most once a MOUNT_DIRTY_GAP: with mounts changing all the time, as often as the full
# check did before it was every 5 min, no more.
MOUNT_DIRTY_GAP = 60.0


class DiskCheck:
    """The disk check job and the roll watch of one scheduler. `regroup()` re-applies the running
    configuration (a log directory moved to another filesystem); `publish_clock()` exports the
    clock guard's state after each look."""

    def __init__(self, state: SchedulerState, checkup: HealthCheck, pressure: PressureWatch, *,
                 regroup: Callable[[], None], publish_clock: Callable[[], None],
                 watch_rolls: bool | None) -> None:
        self._state = state
        self._checkup = checkup
        self._pressure = pressure
        self._regroup = regroup
        self._publish_clock = publish_clock
        self._watch_rolls = watch_rolls       # None: follow service.watch_rolls of the configuration
        self._regrouped = time.monotonic()     # when the last slice of the periodic look was looked at
        self._cursor: tuple = (None, (), 0)   # (the configuration, its logs, the next of its periodic look)
        self._owed = 0.0                      # logs of the periodic look due and not looked at yet (a fraction)
        self._mounts = MountTable()
        self._mount_looks = 0                 # looks a mount change still owes
        self._mount_looked = float("-inf")
        self._mount_dirtied = float("-inf")
        self._dirty_owed = False              # a look a mount change made owes every log's dirtying
        self._rolls: RollWatch | None = None

    def run(self) -> None:
        """One disk check: the clock guard's look, a regroup when a log directory moved (looked
        for when a mount changed, and every REGROUP_EVERY), the roll watch's retries, then every
        filesystem's pressure."""
        self._checkup.beat()
        state = self._state
        state.guard.look()
        self._publish_clock()
        self._look_for_moves(time.monotonic())
        rolls = self._rolls
        if rolls is not None and rolls.unwatched():
            rolls.retry()       # a log directory the writer has created since
        for dev in list(state.filesystems):
            self._pressure.check(dev)
        self._checkup.evaluate()          # problems start and clear in the log without a probe

    def _look_for_moves(self, now: float) -> None:
        """Regroup when a log directory is on another filesystem than its group's: looked for
        after a mount change (MOUNT_GAP), and each log every REGROUP_EVERY, a slice of them at each
        check (`_moved_since`). A look a mount change made marks every log dirty (a mount over a
        log directory is keyed at the next pass), at most once a MOUNT_DIRTY_GAP: one within the
        gap of the last is done when the gap has passed."""
        if self._mounts.changed():
            self._mount_looks = 2
        by_mount = self._mount_looks > 0 and now - self._mount_looked >= MOUNT_GAP
        if by_mount:
            self._dirty_owed = True
        if self._dirty_owed and self._rolls is not None and now - self._mount_dirtied >= MOUNT_DIRTY_GAP:
            self._dirty_owed = False         # owed since a look within the gap: delayed, never dropped
            self._mount_dirtied = now
            self._rolls.marks.all_dirty()
        if not by_mount and not self._moved_since(now):
            return
        if by_mount:
            self._mount_looks -= 1
            self._mount_looked = now
        state = self._state
        try:
            devs = log_devs(state.config)
        except OSError as exc:
            logger.warning("disk check: {}", exc)
            return
        if devs != state.log_devs and not state.stopping.is_set():
            logger.info("a log directory moved to another filesystem; regrouping the logs")
            self._regroup()

    def _moved_since(self, now: float) -> bool:
        """Whether one of the logs due for the periodic look since the last is on another
        filesystem than its group's: a `stat` of each, as many at each check as make every log's
        come once a REGROUP_EVERY (at 10,000 logs, 33 a second rather than 10,000 at once)."""
        state = self._state
        if self._cursor[0] is not state.config:
            self._cursor = (state.config, tuple(state.config.logs), 0)
        config, order, start = self._cursor
        self._owed = min(len(order), self._owed + len(order) * (now - self._regrouped) / REGROUP_EVERY)
        self._regrouped = now
        due = math.floor(self._owed)
        if due <= 0:
            return False
        self._owed -= due
        self._cursor = (config, order, (start + due) % len(order))
        names = [order[(start + i) % len(order)] for i in range(due)]
        try:
            return any(dev_of(str(config.logs[name].path)) != state.log_devs.get(name) for name in names)
        except OSError as exc:
            logger.warning("disk check: {}", exc)
            return False

    def watch(self) -> None:
        """Watch the configured logs' directories for rolls, or stop watching, as configured."""
        state = self._state
        wanted = self._watch_rolls if self._watch_rolls is not None else state.config.service.watch_rolls
        if wanted and self._rolls is None:
            self._rolls = RollWatch(self._pressure.check)
        elif not wanted and self._rolls is not None:
            self._rolls.close()
            self._rolls = None
            logger.info("no longer watching log directories for segment rolls")
        if self._rolls is not None:
            self._rolls.sync({str(state.config.logs[n].path): fs.dev
                              for fs in state.filesystems.values() for n in fs.logs})
        marks = self.marks
        for fs in state.filesystems.values():
            fs.cleaner.memory.changes = marks      # the passes key only what may have changed

    @property
    def marks(self) -> ChangeMarks | None:
        """The roll watch's dirty marks, None while nothing watches the log directories."""
        rolls = self._rolls
        return rolls.marks if rolls is not None else None

    def close(self) -> None:
        """Stop watching (the scheduler stops)."""
        rolls, self._rolls = self._rolls, None
        if rolls is not None:
            rolls.close()
        self._mounts.close()
