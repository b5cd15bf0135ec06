"""What the scheduler's parts share and a reload replaces: the configuration, the audit trail and
the logs grouped by filesystem, with the stop flag and one pass lock per filesystem.

`RetentionScheduler` owns one `SchedulerState` and hands it to the parts that read it (the
deletion passes, the pressure watch, the compaction passes, the health check), so what they share
is an object the import graph sees, not callbacks. Thread-safe: `install` replaces the references
under `apply_lock`; a reader takes one reference (a dict that is never changed once installed) and
works with it; `fs_lock` is guarded.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from policies import RetentionConfig

from ..audit import AuditTrail
from ..deletion.cleaner import Cleaner
from ..deletion.clockguard import ClockGuard
from .filesystems import Filesystem, build_filesystems

__all__ = ["SchedulerState"]


class SchedulerState:
    """The shared state (see the module docstring). `clock`: epoch seconds for the cleaners."""

    def __init__(self, config: RetentionConfig, clock: Callable[[], float]) -> None:
        self.apply_lock = threading.RLock()
        self.stopping = threading.Event()
        self.clock = clock
        self.config = config
        self.audit = AuditTrail(str(config.service.audit))
        self.guard = ClockGuard(config.service.clock_step_threshold, audit=self.audit, clock=clock)
        self.filesystems: dict[int, Filesystem] = {}
        self.log_devs: dict[str, int] = {}
        self._locks_guard = threading.Lock()
        self._fs_locks: dict[int, threading.Lock] = {}
        self.install(config, build_filesystems(config, {}, self.new_cleaner))

    def new_cleaner(self, config: RetentionConfig) -> Cleaner:
        return Cleaner(config, clock=self.clock, audit=self.audit, guard=self.guard)

    def regroup(self, config: RetentionConfig) -> dict[int, Filesystem]:
        """The logs of `config` grouped by filesystem, cleaners reused where nothing changed
        (the audit trail follows `service.audit` first). Not installed yet."""
        if str(config.service.audit) != self.audit.path:
            self.audit = self.guard.audit = AuditTrail(str(config.service.audit))
        built = build_filesystems(config, self.filesystems, self.new_cleaner)
        for dev, fs in built.items():
            if dev in self.filesystems:        # what an unchanged log's last plan was made from stands
                fs.cleaner.memory.adopt(self.filesystems[dev].cleaner.memory, config.logs, config.policies_in_force)
        return built

    def install(self, config: RetentionConfig, filesystems: dict[int, Filesystem]) -> None:
        self.config = config
        self.guard.threshold = config.service.clock_step_threshold
        self.filesystems = filesystems
        self.log_devs = {n: fs.dev for fs in filesystems.values() for n in fs.logs}

    def fs_lock(self, dev: int) -> threading.Lock:
        """The lock a deletion pass on filesystem `dev` holds."""
        with self._locks_guard:
            lock = self._fs_locks.get(dev)
            if lock is None:
                lock = self._fs_locks[dev] = threading.Lock()
            return lock

    def filesystems_of(self, policy: str) -> list[int]:
        """The filesystems holding a log of `policy`."""
        return [dev for dev, fs in self.filesystems.items()
                if any(fs.config.logs[n].policy == policy for n in fs.logs)]
