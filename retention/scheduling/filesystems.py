"""Filesystems: the scheduler's grouping of logs by the disk that holds them.

Logs on one filesystem are cleaned together under pressure (the globally oldest segment goes first)
and at most one pass runs per filesystem at a time; different disks are cleaned independently.
"""

from __future__ import annotations

import os
import select
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from policies import LEVEL_OK, DiskConfig, PolicyConfig, RetentionConfig

from ..deletion.cleaner import Cleaner

__all__ = ["Filesystem", "MountTable", "build_filesystems", "dev_of", "existing", "log_devs", "mountpoint_of"]


@dataclass(eq=False)
class Filesystem:
    """The logs on one filesystem, the cleaner that passes over them and the latest disk reading.

    The reading fields are written by the pressure watch under its lock; others only read them."""

    dev: int
    mountpoint: str
    logs: tuple[str, ...]
    cleaner: Cleaner
    config: RetentionConfig
    used_ratio: float | None = None
    total_bytes: int = 0
    free_bytes: int = 0
    level: int = LEVEL_OK
    forcing: bool = False
    checked_at: float | None = None
    force_since: float | None = None

    def probe(self) -> str:
        """A path on the filesystem to read its usage at (the first log, or its nearest ancestor)."""
        return existing(str(self.config.logs[self.logs[0]].path))

    def policies(self) -> tuple[PolicyConfig, ...]:
        """The policies in force for its logs, each once (a reading asks for them: with 10,000 logs
        one policy each, not 10,000)."""
        return self._policies

    def disks(self) -> tuple[DiskConfig, ...]:
        """The distinct `disk` settings of those policies (equal settings once)."""
        return self._disks

    @cached_property
    def _policies(self) -> tuple[PolicyConfig, ...]:
        in_force = self.config.policies_in_force
        return tuple({id(p): p for p in map(in_force.__getitem__, self.logs)}.values())

    @cached_property
    def _disks(self) -> tuple[DiskConfig, ...]:
        return tuple(dict.fromkeys(p.disk for p in self._policies))

    def paths(self) -> list[str]:
        return [str(self.config.logs[n].path) for n in self.logs]

    def take_reading(self, before: Filesystem) -> None:
        """Carry `before`'s reading over, so a reload is not taken for a crossing."""
        self.used_ratio, self.total_bytes, self.free_bytes = before.used_ratio, before.total_bytes, before.free_bytes
        self.level, self.forcing, self.force_since = before.level, before.forcing, before.force_since
        self.checked_at = before.checked_at


def _nearest(p: str, found) -> str:
    """`p` or its nearest ancestor for which `found` holds (the root when none does)."""
    while not found(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    return p


def existing(path: str) -> str:
    """`path`, or its nearest existing ancestor (a log directory may not exist yet)."""
    return _nearest(os.path.abspath(path), os.path.exists)


def mountpoint_of(path: str) -> str:
    return _nearest(os.path.realpath(path), os.path.ismount)


def dev_of(path: str) -> int:
    """The device of `path`, or of its nearest ancestor that can be read (one `stat` when `path`
    can): a path not created yet, a link loop or a directory this user may not search above it."""
    try:
        return os.stat(path).st_dev
    except OSError:
        return os.stat(existing(path)).st_dev


class MountTable:
    """Whether this process's mount table changed since last asked: `poll` on
    `/proc/self/mountinfo`, which the kernel wakes on any mount or unmount in the process's
    namespace (no reading: the poll itself rearms). Changes since it was made; always True where
    the file cannot be polled, False after `close()`. One thread at a time (the disk check's)."""

    def __init__(self, path: str = "/proc/self/mountinfo") -> None:
        self._file = None
        self._poll = None
        try:
            self._file = open(path, "rb")
            self._poll = select.poll()
            self._poll.register(self._file, select.POLLPRI | select.POLLERR)
            self._state = "polled"           # polled, unpollable, closed
        except (OSError, AttributeError):
            self.close()
            self._state = "unpollable"

    def changed(self) -> bool:
        if self._state == "polled":
            return bool(self._poll.poll(0))
        return self._state == "unpollable"

    def close(self) -> None:
        file, self._file, self._poll, self._state = self._file, None, None, "closed"
        if file is not None:
            file.close()


def log_devs(config: RetentionConfig) -> dict[str, int]:
    """Each log's filesystem (raises OSError when a path cannot be read)."""
    return {name: dev_of(str(log.path)) for name, log in config.logs.items()}


def build_filesystems(config: RetentionConfig, old: dict[int, Filesystem],
                      new_cleaner: Callable[[RetentionConfig], Cleaner]) -> dict[int, Filesystem]:
    """The logs of `config` grouped by filesystem, each group with a fresh cleaner; readings of
    filesystems in `old` carry over."""
    groups: dict[int, list[str]] = {}
    for name, dev in log_devs(config).items():
        groups.setdefault(dev, []).append(name)
    built = {}
    for dev, names in groups.items():
        fs = Filesystem(dev, mountpoint_of(existing(str(config.logs[names[0]].path))), tuple(names),
                        new_cleaner(config), config)
        if dev in old:
            fs.take_reading(old[dev])
        built[dev] = fs
    return built
