"""Helpers of the clock and disk-force probes: the retention tests' builders on the path, a log
filled on a small filesystem, libfaketime for a sidecar whose clock a test steps."""

from __future__ import annotations

import glob
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "retention"))   # retention_helpers, sidecar_helpers

from commitlog import CommitLog, disk_usage  # noqa: E402

# Debian's faketime package; .ci/run installs it. A missing one fails the probes, naming the package.
LIBFAKETIME = next(iter(sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))),
                   "libfaketime.so.1 (install Debian's faketime package)")


def fill_to(log_dir: str, mount: str, above: float, *, segment_size: int) -> list[int]:
    """Append 4 KiB records (the writer's own refusal set past 1) until the filesystem is above
    `above`; returns the base offsets of the log's segments, the last the active one."""
    record = os.urandom(4096)
    with CommitLog.open(log_dir, segment_size=segment_size, flush="none", refuse_writes_ratio=0.99,
                        resume_ratio=0.98) as log:
        while disk_usage(mount).used_ratio <= above + 0.03:
            log.append_batch([record] * 8)
        return [s.base_offset for s in log.segments()]


def commit(log_dir: str, group: str, offset: int) -> None:
    with CommitLog.open(log_dir) as log:
        log.commit(group, offset)


def segment_end(log_dir: str, base: int) -> int:
    with CommitLog.open(log_dir, readonly=True) as log:
        return log.segment_end_offset(base)


def age(log_dir: str, bases, seconds: float, now: float) -> None:
    """Make segments look last written `seconds` before `now`."""
    for base in bases:
        os.utime(os.path.join(log_dir, f"{base:020d}.log"), (now - seconds, now - seconds))


def audit_events(path: str, event: str) -> list[dict]:
    try:
        with open(path) as f:
            return [e for e in map(json.loads, f) if e.get("event") == event]
    except FileNotFoundError:
        return []


def faketime_env(timestamp_file: Path, offset: str = "+0", *, fixed: bool = False) -> dict:
    """The environment of a process whose wall clock follows `timestamp_file` (reread at most every
    second or two: write "+365d" into it to step the running process a year ahead). The monotonic
    clock stays real and `time.sleep` waits on it (faketime_site/sitecustomize.py says why);
    /proc/uptime, which the clock guard reads, is the kernel's either way. `fixed`: the process is
    never stepped, so its offset goes in libfaketime's FAKETIME and no file is read.

    Not FAKETIME_NO_CACHE: libfaketime 0.9.10 (Debian's) then rereads the file at every call into
    buffers its threads share: with two threads reading the clock, 746 of 78,000 readings were the
    real time, and the guard rightly took one such reading for the clock coming back and stepping
    again (a CI failure). A cache of a second rereads it once a second: 0 of 54 million readings by 2
    and 8 threads. `test_rig_clock.py` keeps that true."""
    step_clock(timestamp_file, offset)
    site = str(Path(__file__).resolve().parent / "faketime_site")
    env = {"LD_PRELOAD": LIBFAKETIME, "FAKETIME_DONT_FAKE_MONOTONIC": "1",
           "PYTHONPATH": os.pathsep.join([site, *filter(None, [os.environ.get("PYTHONPATH")])])}
    if fixed:
        return {**env, "FAKETIME": offset}
    return {**env, "FAKETIME_TIMESTAMP_FILE": str(timestamp_file), "FAKETIME_CACHE_DURATION": "1"}


def step_clock(timestamp_file: Path, offset: str) -> None:
    """Set the offset libfaketime reads at every call, atomically: a process reading the file while
    it is rewritten in place would see it empty, an offset of 0, and its clock return for an instant."""
    tmp = timestamp_file.with_name(timestamp_file.name + ".tmp")
    tmp.write_text(offset + "\n")
    os.replace(tmp, timestamp_file)


def polled(sidecar, path: str) -> bytes:
    """A GET the waits below repeat, tried again (up to 3 times) when the connection is reset: under
    libfaketime the sidecar's HTTP server (waitress's idle sweep compares wall-clock times) now and
    then closes a connection it takes for idle, which is the HTTP layer's, not the clock guard's
    (see docs/security.md, Clock steps)."""
    for attempt in range(3):
        try:
            return sidecar.request("GET", path)[2]
        except OSError:
            if attempt == 2:
                raise
            time.sleep(0.2)
    raise AssertionError("unreachable")


def passes(sidecar) -> float:
    """Cleanup passes the sidecar has run (every kind and outcome), from /metrics."""
    body = polled(sidecar, "/metrics")
    return sum(float(line.rsplit(" ", 1)[1]) for line in body.decode().splitlines()
               if line.startswith("retention_passes_total{"))


def problems(sidecar) -> list[str]:
    return json.loads(polled(sidecar, "/healthz"))["problems"]


def clock_problem(sidecar) -> str | None:
    return next((p for p in problems(sidecar) if p.startswith("clock-stepped")), None)


def more_passes(sidecar, count: int = 3, timeout: float = 60.0) -> None:
    """Wait until the sidecar has run `count` more passes than now."""
    start = passes(sidecar)
    sidecar.wait_for(lambda: passes(sidecar) >= start + count, timeout=timeout, what=f"{count} more passes")
