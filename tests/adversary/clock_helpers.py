"""Helpers of the clock and disk-force probes: the retention tests' builders on the path, a log
filled on a small filesystem, libfaketime for a sidecar whose clock a test steps."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "retention"))   # retention_helpers, sidecar_helpers

from commitlog import CommitLog, disk_usage  # noqa: E402

LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
YEAR = 365 * 86400.0


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


def faketime_env(timestamp_file: Path, offset: str = "+0") -> dict:
    """The environment of a process whose clock follows `timestamp_file` (re-read at every call:
    write "+365d" into it to step the running process a year ahead). libfaketime fakes
    CLOCK_MONOTONIC and CLOCK_BOOTTIME by the same offset; /proc/uptime is the kernel's."""
    timestamp_file.write_text(offset + "\n")
    return {"LD_PRELOAD": LIBFAKETIME, "FAKETIME_TIMESTAMP_FILE": str(timestamp_file), "FAKETIME_NO_CACHE": "1"}
