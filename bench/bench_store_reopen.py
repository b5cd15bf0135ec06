"""Reopening a log after SIGKILL: a 2 GiB log against a 128 MiB log, measured in the same run.

Target: the 2 GiB log opens in at most 1.5 times the time of the 128 MiB log (opening must not
scale with the size of the log: only the last segment's tail is scanned, from its last index
checkpoint). A child process fills each log (default 64 MiB segments; 128 MiB and 2 GiB of
data). Then, eleven times over and alternating between the two logs, a child reopens the log
and appends 100-byte records with flush="none" until the parent kills it with SIGKILL 50 ms in
(so the small log grows somewhat: its size is printed), and the parent times CommitLog.open,
recovery included (the torn tail, the leftover prepared segment). The figure is the median.
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from commitlog import CommitLog

OPENS = 11
FILL = r"""
import os, sys
from commitlog import CommitLog
path, size = sys.argv[1], int(sys.argv[2])
value = os.urandom(16384)
written = 0
with CommitLog.open(path, flush="none") as log:
    while written < size:
        log.append_batch([value] * 512)
        written += 512 * (len(value) + 21)
"""
APPEND = r"""
import os, sys
from commitlog import CommitLog
log = CommitLog.open(sys.argv[1], flush="none")
value = os.urandom(100)
sys.stdout.write("ready\n"); sys.stdout.flush()
while True:
    log.append(value)
"""


def fill(path: str, size: int) -> None:
    subprocess.run([sys.executable, "-c", FILL, path, str(size)], check=True)


def kill_while_appending(path: str) -> None:
    proc = subprocess.Popen([sys.executable, "-c", APPEND, path], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL


def time_open(path: str) -> tuple[float, int, int]:
    kill_while_appending(path)
    t = time.perf_counter()
    log = CommitLog.open(path)
    elapsed = time.perf_counter() - t
    segments = log.segments()
    log.close()
    return elapsed, len(segments), sum(s.used_bytes for s in segments)


def main() -> int:
    workdir = tempfile.mkdtemp(prefix="bench-store-")
    try:
        small, large = os.path.join(workdir, "small"), os.path.join(workdir, "large")
        fill(small, 128 << 20)
        fill(large, 2 << 30)
        t_small, t_large = [], []
        for _ in range(OPENS):  # interleaved, so a busy moment of the machine hits both
            elapsed, n_small, s_small = time_open(small)
            t_small.append(elapsed)
            elapsed, n_large, s_large = time_open(large)
            t_large.append(elapsed)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    m_small, m_large = statistics.median(t_small), statistics.median(t_large)
    ratio = m_large / m_small
    print(f"baseline  open after SIGKILL, {s_small / 2**20:.0f} MiB log ({n_small} segments): "
          f"median {m_small * 1000:.1f} ms  (all: {', '.join(f'{t * 1000:.1f}' for t in t_small)})")
    print(f"figure    open after SIGKILL, {s_large / 2**30:.1f} GiB log ({n_large} segments): "
          f"median {m_large * 1000:.1f} ms  (all: {', '.join(f'{t * 1000:.1f}' for t in t_large)})")
    print(f"ratio     {ratio:.2f} (target <= 1.5)")
    print(f"FIGURE reopen_2GiB {m_large * 1000:.1f} ms "
          f"baseline=reopen_{s_small / 2**20:.0f}MiB:{m_small * 1000:.1f}ms "
          f"ratio={ratio:.2f} target<=1.5 {'met' if ratio <= 1.5 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
