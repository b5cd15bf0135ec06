"""One retention owner per log: the process that deletes and compacts a log's segments holds an
exclusive `flock` on `<log>/.retention.lock` (its pid written in it) for as long as it manages
the log, so a second sidecar (or a `retention clean` while a sidecar runs) leaves the log alone
and says which process owns it, instead of racing the owner removal by removal.

The lock is taken on a log's first pass and kept until the cleaner that took it closes (a reload
hands it from the old cleaner to the new one without letting go: claims of one process on one
log share a descriptor and are counted). The kernel drops it when the owner dies, so a standby
sidecar takes over on its next pass. A log on a read-only mount, or a directory this process may
not write, cannot be locked and is not claimed: nothing can be deleted there either, and the pass
says why. A disk too full to create the lock file is passed unclaimed: deleting there comes first.

Each claim holds a descriptor. Claims stop `RESERVE` descriptors short of the soft limit
(RLIMIT_NOFILE), which `raise_descriptor_limit` lifts to the hard one (the sidecar does so at
start): a log past that is not claimed but named, `NoDescriptors` (health: log-no-descriptors).

Thread-safe: the registry of held locks takes its lock; process-safe by construction (flock).
"""

from __future__ import annotations

import errno
import os
import resource
import threading

from commitlog.layout import RETENTION_LOCK_FILE
from commitlog.locks import try_pid_lock

__all__ = ["RESERVE", "NoDescriptors", "OwnedElsewhere", "claim", "held_fds", "raise_descriptor_limit", "release",
           "tight"]

RESERVE = 256      # descriptors left to all but claims: HTTP, audit, SQLite, a pass's opens of logs
_OUT = (errno.EMFILE, errno.ENFILE)

# Read-only, not ours, gone, or a disk so full it has no inode for the lock file: retention must
# still act there (a full disk most of all), unowned.
_UNLOCKABLE = (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT, errno.ENOSPC, errno.EDQUOT)

_lock = threading.Lock()
_held: dict[str, list[int]] = {}          # realpath of the log -> [fd, claims]


class OwnedElsewhere(Exception):
    """Another process owns the log's retention. `holder_pid` is None when it left no pid."""

    def __init__(self, path: str, holder_pid: int | None) -> None:
        who = f"pid {holder_pid}" if holder_pid else "another process"
        super().__init__(f"another retention process owns this log ({who}, "
                         f"{os.path.join(path, RETENTION_LOCK_FILE)}); left alone")
        self.path = path
        self.holder_pid = holder_pid


class NoDescriptors(Exception):
    """This process has no descriptor left to own one more log with."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(f"cannot own this log for lack of file descriptors ({why}): raise the open-files "
                         f"limit (LimitNOFILE=, ulimit -n) or run fewer logs per sidecar; not cleaned")
        self.path = path


def soft_limit() -> int:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return soft if soft != resource.RLIM_INFINITY else 1 << 30


def raise_descriptor_limit() -> tuple[int, int]:
    """Lift the soft RLIMIT_NOFILE to the hard one; returns (before, after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            return soft, soft
    return soft, hard


def held_fds() -> frozenset[str]:
    """The descriptor numbers of this process's claims, as /proc/self/fd names them."""
    with _lock:
        return frozenset(str(held[0]) for held in _held.values())


def tight() -> bool:
    """Claims hold half the descriptors they may: logs are not kept open between passes."""
    with _lock:
        return len(_held) >= (soft_limit() - RESERVE) // 2


def claim(path: str) -> str | None:
    """Claim log directory `path` for this process: the claim's key when claimed (give it back
    with `release(key)`, once per claim), None when it cannot be locked (read-only, no
    permission, gone): nothing is held. OwnedElsewhere when another process holds it;
    NoDescriptors when this one has no descriptor to spare."""
    key = os.path.realpath(path)
    with _lock:
        held = _held.get(key)
        if held is not None:
            held[1] += 1
            return key
        limit = soft_limit()
        if len(_held) >= limit - RESERVE:
            raise NoDescriptors(path, f"{len(_held)} logs owned, the limit is {limit} less {RESERVE} kept")
        try:
            fd, holder = try_pid_lock(os.path.join(key, RETENTION_LOCK_FILE))
        except OSError as exc:
            if exc.errno in _UNLOCKABLE:
                return None
            if exc.errno in _OUT:
                raise NoDescriptors(path, os.strerror(exc.errno)) from None
            raise
        if fd is None:
            raise OwnedElsewhere(path, holder[0] if holder else None)
        _held[key] = [fd, 1]
        return key


def release(key: str) -> None:
    """Give back one claim (`claim`'s key); the lock goes with the last one."""
    with _lock:
        held = _held.get(key)
        if held is None:
            return
        held[1] -= 1
        if held[1] <= 0:
            del _held[key]
            os.close(held[0])
