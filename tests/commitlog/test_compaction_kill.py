"""Compaction beside live processes: SIGKILLs of a compacting process at random instants while a
writer (which also marks) and a verifying reader run in other processes, and a small real
filesystem where compaction must never make the writer fail and must give space back."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from cl_helpers import child_env, value_for, wait_for_line
from cx_helpers import (assert_one_file_per_offset, key_of, keyed_decide, marked_by_writer,
                        merge_runs)

from commitlog import CommitLog

SEG = 32 * 1024
KILLS = 32


def spawn(call: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", f"import cx_helpers; cx_helpers.{call}"],
                            env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def check_after_open(path: str) -> int:
    """Open for writing (finishing any interrupted swap), then: no offset in two files, no
    `.cleaned` file, every record the rule must keep present with its content (the unkeyed ones
    the writer never marks, the newest of each key), no marked one."""
    with CommitLog.open(path) as log:
        end = log.end_offset
        assert_one_file_per_offset(log)
        marks = log.marks_snapshot()
        got = {}
        for r in log.scan():
            assert r.key == key_of(r.offset) and r.value == value_for(r.offset, 300)
            assert not marks.is_marked(r.offset)
            got[r.offset] = r
        newest = {}
        for o in range(end):
            if key_of(o) is not None:
                newest[key_of(o)] = o
        for o in range(end):
            # The writer's own rule says what it marked: the marks file forgets the marks a
            # compaction applied (their records are gone), so it cannot say it any more.
            must = (key_of(o) is None and not marked_by_writer(o)) or newest.get(key_of(o)) == o
            if must:
                assert o in got, f"live record {o} lost"
        return end


def test_sigkill_a_compactor_at_random_instants_beside_a_writer_and_a_reader(tmp_path):
    path = str(tmp_path / "log")
    stop = str(tmp_path / "stop")
    rng = random.Random(13)
    with CommitLog.open(path, segment_size=SEG) as log:
        for o in range(3000):
            log.append(value_for(o, 300), key=key_of(o), timestamp_ms=1_600_000_000_000 + o)
        log.mark_dead([o for o in range(3000) if marked_by_writer(o)])
    killed = 0
    for round_ in range(KILLS):
        if os.path.exists(stop):
            os.unlink(stop)
        writer = spawn(f"cx_writer({path!r}, {SEG}, {stop!r})")
        assert wait_for_line(writer).get("ready")
        reader = spawn(f"cx_reader({path!r}, {stop!r})")
        compactor = spawn(f"cx_compactor({path!r}, fill=0.9)")
        assert wait_for_line(compactor).get("ready")
        time.sleep(rng.uniform(0.02, 0.5))
        compactor.send_signal(signal.SIGKILL)
        killed += compactor.wait(30) == -signal.SIGKILL
        with open(stop, "w"):
            pass
        assert writer.wait(60) == 0, writer.stderr.read()[-2000:]
        assert reader.wait(60) == 0, (reader.stdout.read(), reader.stderr.read()[-2000:])
        check_after_open(path)
    assert killed == KILLS


@pytest.mark.parametrize("small_fs", [("tmpfs", 4 << 20)], indirect=True)
def test_on_a_small_filesystem_compaction_never_fails_the_writer_and_gives_space_back(small_fs, tmp_path):
    """Nothing deletable (a sidecar would keep every segment for an unconsumed group) and mostly
    dead: the writer fills the disk to its line and blocks; compaction (its output plus a
    segment must fit) gives space back, and the writer resumes and finishes: never a failure,
    never a SIGBUS."""
    path = os.path.join(small_fs, "log")
    stop = str(tmp_path / "stop")
    seg, target = 128 * 1024, 30_000
    writer = spawn(f"cx_writer({path!r}, {seg}, {stop!r}, {target})")
    ratio = lambda: 1 - os.statvfs(small_fs).f_bavail / os.statvfs(small_fs).f_blocks  # noqa: E731
    try:
        assert wait_for_line(writer).get("ready")
        deadline = time.monotonic() + 120
        peak, reclaimed, outputs = 0.0, 0, 0
        with CommitLog.open(path, readonly=True) as log:
            while writer.poll() is None and time.monotonic() < deadline:
                peak = max(peak, ratio())
                if peak < 0.85:
                    time.sleep(0.05)
                    continue
                marks, decide = keyed_decide(log)
                outs = log.compact(merge_runs(log, 0.9), decide, marks=marks)
                outputs += len(outs)
                reclaimed += sum(o.bytes_before - o.bytes_after for o in outs)
                time.sleep(0.05)
        assert writer.wait(60) == 0, writer.stderr.read()[-2000:]
    finally:
        writer.kill()
    assert peak >= 0.85 and outputs and reclaimed > 8 * seg, (peak, outputs, reclaimed)
    assert ratio() < peak - 0.3, (peak, ratio())
    assert check_after_open(path) == target
