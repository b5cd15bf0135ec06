"""Process identity and liveness, so an abandoned job (its driver died) stops blocking streams.

A pid alone can be reused; (pid, start time in clock ticks since boot, from /proc/<pid>/stat)
names one process for the machine's uptime. Spark's python workers descend from the JVM that
launched them, so the driver JVM is found by walking up from a planner worker on the driver.
"""

from __future__ import annotations

import os
from typing import NamedTuple


class ProcessId(NamedTuple):
    pid: int
    start: int | None     # clock ticks after boot; None where /proc is unavailable


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(command, parent pid, start time) of `pid` from /proc, or None when it does not exist or
    is a zombie (exited, not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("utf-8", "replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command is in parentheses and may itself contain spaces or parentheses.
    lpar, rpar = data.find("("), data.rfind(")")
    comm = data[lpar + 1:rpar]
    fields = data[rpar + 2:].split()
    # fields[0] is field 3 (state); ppid is field 4, starttime field 22.
    if fields[0] in ("Z", "X"):
        return None
    return comm, int(fields[1]), int(fields[19])


def identify(pid: int | None = None) -> ProcessId:
    """The identity of `pid` (default: this process)."""
    pid = os.getpid() if pid is None else pid
    st = _stat(pid)
    return ProcessId(pid, st[2] if st else None)


def jvm_ancestor() -> ProcessId | None:
    """The nearest ancestor of this process that is a JVM (the Spark process that started this
    python worker), or None when there is none (no /proc, or not under Spark)."""
    pid = os.getppid()
    for _ in range(16):
        if pid <= 1:
            return None
        st = _stat(pid)
        if st is None:
            return None
        comm, ppid, start = st
        if comm == "java" or comm.startswith("java"):
            return ProcessId(pid, start)
        pid = ppid
    return None


def is_alive(pid: int | None, start: int | None) -> bool:
    """False only when the process is known to be gone (or its pid now names another process)."""
    if pid is None:
        return True
    st = _stat(pid)
    if st is not None:
        return start is None or st[2] == start
    if os.path.isdir("/proc/self"):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
