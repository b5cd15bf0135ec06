"""Helpers of the `commitlog` command's tests: a log with known records and groups, the command
run as a real subprocess (`python -m commitlog.tool`), a digest of a directory that changes with
any byte, name, mode or mtime, and a writer in another process."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from commitlog import CommitLog

T0 = 1_800_000_000_000          # the first record's timestamp (ms); record i is at T0 + 1000 * i
SEGMENT = 4096


def value_of(i: int) -> bytes:
    """Every fifth record's value is not UTF-8."""
    return b"\xff\xfe-%d" % i if i % 5 == 4 else b"value-%d" % i


def make_log(path: Path, records: int = 600, groups: dict[str, int] | None = None, segment_size: int = SEGMENT) -> None:
    with CommitLog.open(path, segment_size=segment_size) as log:
        for i in range(records):
            log.append(value_of(i), key=None if i % 3 == 2 else b"k%d" % (i % 7), timestamp_ms=T0 + 1000 * i)
        for group, offset in (groups if groups is not None else {"billing": 120, "audit": 7}).items():
            offset = min(offset, records)
            log.commit(group, offset)


def run_tool(*args: str, prefix: tuple[str, ...] = (), timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, sys.executable, "-m", "commitlog.tool", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def popen_tool(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "commitlog.tool", *map(str, args)], text=True, **kwargs)


def digest(root: Path) -> str:
    """Every entry under `root`: name, mode, and for a file its size, mtime and bytes. Not a
    directory's mtime: where this user may write the log, a read-only open's SQLite connection
    creates `state.db-wal`/`-shm` for the length of the read and removes them (docs/commitlog-cli.md)."""
    h = hashlib.sha256()
    for folder, dirs, files in sorted(os.walk(root)):
        for name in sorted(dirs + files):
            path = os.path.join(folder, name)
            st = os.lstat(path)
            h.update(f"{path} {st.st_mode}".encode())
            if name in files:
                h.update(f" {st.st_size} {st.st_mtime_ns}".encode())
            if name in files and os.path.isfile(path):
                with open(path, "rb") as f:
                    h.update(f.read())
    return h.hexdigest()


WRITER = r"""
import sys
from commitlog import CommitLog
log = CommitLog.open(sys.argv[1], segment_size=4096)
print("open", flush=True)
for line in sys.stdin:
    for i in range(int(line)):
        log.append(b"new-%d" % i, key=b"w")
    log.flush()
    print(log.end_offset, flush=True)
log.close()
"""


class Writer:
    """A process holding the log open for writing; `append(n)` makes it append n records."""

    def __init__(self, path: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "open"

    def append(self, n: int) -> int:
        self.proc.stdin.write(f"{n}\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def one_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]
