"""Crash safety: a real child process appends with flush="sync" and is killed with SIGKILL at
random moments; every record whose append returned survives intact and no torn record shows."""

from __future__ import annotations

import logging
import os
import random
import select
import signal
import subprocess
import time

import pytest

from commitlog import CommitLog
from commitlog import record as rec
from commitlog.layout import PREALLOC_PREFIX

from cl_helpers import check_record, spawn

SEGMENT = 64 * 1024
MAX_VALUE = 6000  # up to ~10 records a segment: the child rolls every few appends


def _run_and_kill(path: str, rng: random.Random, seed: int) -> list[int]:
    """Start an appender, SIGKILL it after a random delay, return the offsets it reported."""
    proc = spawn(f"crash_appender({path!r}, {SEGMENT}, {MAX_VALUE}, {seed})",
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    fd = proc.stdout.fileno()
    buf = bytearray()
    try:
        deadline = time.monotonic() + 30
        while len(buf) < 8:  # the ready marker: the log is open
            if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
                raise TimeoutError("appender never became ready")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise RuntimeError(f"appender died: {proc.stderr.read().decode()}")
            buf += chunk
        assert bytes(buf[:8]) == b"R" * 8
        del buf[:8]
        # Mostly short delays (the first appends, the first roll), sometimes longer ones.
        delay = rng.choice([rng.uniform(0, 0.02), rng.uniform(0, 0.1), rng.uniform(0.05, 0.3)])
        end = time.monotonic() + delay
        while (left := end - time.monotonic()) > 0:
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                buf += chunk
        os.kill(proc.pid, signal.SIGKILL)
        while chunk := os.read(fd, 65536):  # what was reported before the kill
            buf += chunk
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        err = proc.stderr.read().decode()
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL, f"appender failed: rc={proc.returncode} {err}"
    assert len(buf) % 8 == 0
    return [int.from_bytes(buf[i:i + 8], "little") for i in range(0, len(buf), 8)]


def _verify(path: str, reported: list[int], acknowledged: int, caplog) -> dict:
    """Reopen as the writer (recovery runs) and check every record and the segment tail;
    `acknowledged`: the end offset every round so far reported written (none may be lost)."""
    stats = {"truncated": 0, "sealed_last": False}
    with caplog.at_level(logging.WARNING, logger="commitlog"):
        caplog.clear()
        log = CommitLog.open(path, flush="sync")
    stats["truncated"] = sum("truncated" in r.getMessage() for r in caplog.records)
    try:
        end = log.end_offset
        assert end >= acknowledged, f"lost reported records: end {end} < {acknowledged}"
        n = 0
        for r in log.scan():
            assert r.offset == n, f"offset {r.offset} where {n} was expected"
            check_record(r, MAX_VALUE)
            n += 1
        assert n == end, f"scan stopped at {n}, end_offset is {end}"
        for off in reported[-20:]:  # random access through the index, too
            check_record(log.read(off), MAX_VALUE)
        segs = log.segments()
        assert sum(s.record_count for s in segs) == end
        stats["segments"], stats["end"] = len(segs), end
        if segs:
            stats["sealed_last"] = _tail_is_clean(segs[-1])
        else:                   # killed before its first append (a loaded host): nothing written
            assert end == 0
    finally:
        log.close()
    assert not [n for n in os.listdir(path) if n.startswith(PREALLOC_PREFIX)]  # the crash's leftover too
    return stats


def _tail_is_clean(last) -> bool:
    """No torn record: after the last good record of segment `last` only zeros (or a sealed
    segment's marker, then zeros); True when it is sealed."""
    with open(last.path, "rb") as f:
        f.seek(last.used_bytes)
        tail = f.read()
    sealed = tail[:4] == rec.END_MARKER.to_bytes(4, "little")
    assert not any(tail[4:] if sealed else tail), f"garbage after the last record of {last.path}"
    return sealed


def _crash_rounds(path: str, kills: int, seed: int, caplog) -> None:
    """Kill an appender `kills` times, and more if needed until the log has rolled that many
    times too (on a busy machine a round may append little)."""
    rng = random.Random(seed)
    truncations = sealed = rounds = acknowledged = 0
    stats = {"segments": 0}
    while rounds < kills or stats["segments"] < kills:
        assert rounds < 4 * kills, f"only {stats['segments']} segments after {rounds} kills"
        reported = _run_and_kill(path, rng, seed * 1000 + rounds)
        rounds += 1
        if reported:
            assert reported == list(range(reported[0], reported[0] + len(reported)))
            acknowledged = max(acknowledged, reported[-1] + 1)
        stats = _verify(path, reported, acknowledged, caplog)
        truncations += stats["truncated"]
        sealed += stats["sealed_last"]
    print(f"{rounds} kills: {stats['end']} records in {stats['segments']} segments, "
          f"{truncations} torn tails truncated, {sealed} reopened on a sealed last segment")


@pytest.mark.timeout(150)
def test_sigkill_during_appends_and_rolls_loses_no_reported_record(tmp_log_dir, caplog):
    _crash_rounds(tmp_log_dir, 32, 1, caplog)


@pytest.mark.soak
def test_sigkill_soak(tmp_log_dir, caplog):
    _crash_rounds(tmp_log_dir, 300, 2, caplog)
