"""Helpers of the gap probes (tests/adversary/test_store_gaps_*.py): logs whose segments a
compaction drops whole, and a compactor child that SIGKILLs itself at its Nth file-system call.
Run the child as `python -c "import store_gaps_helpers as h; h.kill_compactor(...)"` with this
directory on PYTHONPATH."""

from __future__ import annotations

import os
import signal
import sys

from commitlog import CommitLog

SEG = 4096
FS_CALLS = ("rename", "unlink", "fsync", "write", "replace", "utime")


def value(offset: int) -> bytes:
    return b"v%05d-" % offset * 40


def one_key_log(path: str, n: int = 100) -> list[int]:
    """One key written `n` times to 4 KiB segments (the issue's reproduction); the bases."""
    with CommitLog.open(path, segment_size=SEG) as log:
        for o in range(n):
            log.append(value(o), key=b"k")
        return [s.base_offset for s in log.segments()]


def junk_log(path: str) -> tuple[list[int], set[int]]:
    """Unkeyed records, two runs of whole segments marked dead (the second segment, and the
    fourth and fifth: a middle and a later gap once compacted), the first segment kept. Returns
    the bases and the offsets marked."""
    with CommitLog.open(path, segment_size=SEG) as log:
        for o in range(300):
            log.append(value(o))
        bases = [s.base_offset for s in log.segments()]
        dead = set(range(bases[1], bases[2])) | set(range(bases[3], bases[5]))
        log.mark_dead(sorted(dead))
        return bases, dead


def dead_only(offset, key, tombstone, marked):
    return "dead" if marked else None


def compact_junk(path: str) -> list:
    """Compact every sealed segment of `junk_log` alone: the dead ones go whole."""
    with CommitLog.open(path) as log:
        sealed = [s.base_offset for s in log.segments()[:-1]]
        return log.compact([[b] for b in sealed], dead_only)


def kill_compactor(path: str, kill_at: int) -> None:
    """`compact_junk`, SIGKILLing this process at its `kill_at`th file-system call (0: never;
    then it prints how many calls it made)."""
    calls = [0]

    def wrap(name):
        real = getattr(os, name)

        def call(*args, **kwargs):
            calls[0] += 1
            if calls[0] == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)
        return call

    for name in FS_CALLS:
        setattr(os, name, wrap(name))
    compact_junk(path)
    print(calls[0])
    sys.stdout.flush()


def live_offsets(path: str) -> list[int]:
    with CommitLog.open(path, readonly=True) as log:
        return [r.offset for r in log.scan()]
