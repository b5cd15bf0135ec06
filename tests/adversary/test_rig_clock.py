"""The clock probes' rig: a process under `faketime_env` whose clock is stepped through a file reads
the stepped clock at every call, from every thread. A reading of the real time in between is what a
sidecar's clock guard takes for the clock coming back (and stepping again), so a probe that met one
would fail on the rig, not on the product."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from clock_helpers import faketime_env

READERS = """
import sys, threading, time
floor, seconds = float(sys.argv[1]), float(sys.argv[2])
counts = []
def read():
    calls = early = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(200):
            calls += 1
            early += time.time() < floor
    counts.append((calls, early))
threads = [threading.Thread(target=read) for _ in range(4)]
[t.start() for t in threads]
[t.join() for t in threads]
print(sum(c for c, _ in counts), sum(e for _, e in counts))
"""


def test_four_threads_reading_a_clock_stepped_through_a_file_never_read_the_real_time(tmp_path):
    env = faketime_env(tmp_path / "faketime", "+365d")
    floor = time.time() + 300 * 86400
    done = subprocess.run([sys.executable, "-c", READERS, str(floor), "4"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})
    assert done.returncode == 0, done.stderr
    calls, early = map(int, done.stdout.split())
    assert calls > 10_000 and early == 0, f"{early} of {calls} readings were the real time"
