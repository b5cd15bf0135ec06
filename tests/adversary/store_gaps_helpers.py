"""Helpers of the gap probes (tests/adversary/test_store_gaps_*.py): logs whose segments a
compaction drops whole, and a compactor child that SIGKILLs itself at its Nth file-system call.
The children are forks of one fresh interpreter (`KillServer`), never of the test process."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

from commitlog import CommitLog

SEG = 4096
FS_CALLS = ("rename", "unlink", "fsync", "write", "replace", "utime")
_REAL = {name: getattr(os, name) for name in FS_CALLS}


def value(offset: int) -> bytes:
    return b"v%05d-" % offset * 40


def one_key_log(path: str, n: int = 100) -> list[int]:
    """One key written `n` times to 4 KiB segments (the issue's reproduction); the bases."""
    with CommitLog.open(path, segment_size=SEG) as log:
        for o in range(n):
            log.append(value(o), key=b"k")
        return [s.base_offset for s in log.segments()]


def junk_log(path: str, *, head: bool = False) -> tuple[list[int], set[int]]:
    """Unkeyed records, two runs of whole segments marked dead (the second segment, and the
    fourth and fifth: a middle and a later gap once compacted), the first segment kept unless
    `head`. Returns the bases and the offsets marked."""
    with CommitLog.open(path, segment_size=SEG) as log:
        for o in range(300):
            log.append(value(o))
        bases = [s.base_offset for s in log.segments()]
        dead = set(range(bases[0 if head else 1], bases[2])) | set(range(bases[3], bases[5]))
        log.mark_dead(sorted(dead))
        return bases, dead


def dead_only(offset, key, tombstone, marked):
    return "dead" if marked else None


def compact_junk(path: str, *, dropped_only: bool = False) -> list:
    """Compact every sealed segment of `junk_log` alone: the dead ones go whole. `dropped_only`:
    only the dead ones (the first two alone, the fourth and fifth as one run)."""
    with CommitLog.open(path) as log:
        sealed = [s.base_offset for s in log.segments()[:-1]]
        if dropped_only:
            return log.compact([sealed[0:1], sealed[1:2], sealed[3:5]], dead_only)
        return log.compact([[b] for b in sealed], dead_only)


def kill_compactor(path: str, kill_at: int) -> int:
    """`compact_junk(dropped_only=True)`, SIGKILLing this process at its `kill_at`th file-system
    call (0: never; then it returns how many calls it made)."""
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
    try:
        compact_junk(path, dropped_only=True)
    finally:
        for name in FS_CALLS:
            setattr(os, name, _REAL[name])
    return calls[0]


def forked_kill(path: str, kill_at: int) -> int:
    """Run `kill_compactor` in a child forked from this process; its wait status. Only in a
    process whose only thread is the caller's (`KillServer`'s)."""
    pid = os.fork()
    if pid == 0:
        try:
            kill_compactor(path, kill_at)
        finally:
            os._exit(3)
    return os.waitpid(pid, 0)[1]


class KillServer:
    """A fresh interpreter, one thread, that forks a compactor child per `kill` (one interpreter
    start for every kill). Not a fork of the test process: a fork copies the locks other threads
    hold, SQLite's among them, and a pytest-xdist worker has such threads (docs: development.md)."""

    def __enter__(self) -> KillServer:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self._proc = subprocess.Popen([sys.executable, os.path.abspath(__file__)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True, env=env)
        return self

    def kill(self, path: str, kill_at: int) -> int:
        """The wait status of a compactor of `path` SIGKILLed at its `kill_at`th call."""
        self._proc.stdin.write(f"{kill_at} {path}\n")
        self._proc.stdin.flush()
        return int(self._proc.stdout.readline())

    def __exit__(self, *exc) -> None:
        self._proc.stdin.close()
        self._proc.wait(timeout=60)


def live_offsets(path: str) -> list[int]:
    with CommitLog.open(path, readonly=True) as log:
        return [r.offset for r in log.scan()]


def java_walk(path: str, start: int = 0, end: int = 1 << 62) -> subprocess.CompletedProcess:
    """The JVM reader's walk of [start, end) (DumpRecords: "start S", one line a record, "stop
    WHY AT"); skips the test when the jar is not built (`make jar` builds it)."""
    import pyspark
    import pytest
    from commitlog.spark import jvm
    if not jvm.available() or shutil.which("java") is None:
        pytest.skip(f"{jvm.JAR} is not built (`make jar` builds it) or no java")
    classpath = f"{jvm.JAR}:{os.path.join(os.path.dirname(pyspark.__file__), 'jars', '*')}"
    return subprocess.run(["java", "-cp", classpath, "commitlog.spark.jvm.DumpRecords", path,
                           str(start), str(end)], capture_output=True, text=True, timeout=120)


def walked(proc: subprocess.CompletedProcess) -> tuple[int, list[int], str]:
    """(start offset, record offsets, why it stopped) of a successful `java_walk`."""
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    return int(lines[0].split()[1]), [int(line.split()[0]) for line in lines[1:-1]], \
        lines[-1].split()[1]


if __name__ == "__main__":          # KillServer's interpreter: "KILL_AT PATH" in, a wait status out
    for line in sys.stdin:
        at, where = line.rstrip("\n").split(" ", 1)
        print(forked_kill(where, int(at)), flush=True)
