"""Issue 34, item 12: a compaction that drops whole segments records their range before it
removes them; SIGKILLed at every file-system call it makes, it leaves every offset served by its
old file or passed as a recorded compaction's gap: never a false CorruptLogError, never a false
retention loss (OffsetOutOfRangeError), and the next compaction finishes the job."""

from __future__ import annotations

import os
import shutil
import signal

from store_gaps_helpers import KillServer, compact_junk, junk_log, kill_compactor, live_offsets

from commitlog import CommitLog


def test_a_compaction_dropping_segments_killed_at_any_step_leaves_no_false_gap(tmp_path):
    template = str(tmp_path / "template")
    bases, dead = junk_log(template, head=True)
    everything = list(range(300))
    kept = [o for o in everything if o not in dead]
    counted = str(tmp_path / "counted")
    shutil.copytree(template, counted)
    steps = kill_compactor(counted, 0)
    assert steps > 20                                      # records, renames, unlinks, fsyncs
    assert live_offsets(counted) == kept
    with KillServer() as server:
        for kill_at in range(1, steps + 1):
            path = str(tmp_path / f"killed-{kill_at}")
            shutil.copytree(template, path)
            status = server.kill(path, kill_at)
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, kill_at
            with CommitLog.open(path, readonly=True) as log:   # a reader before any repair
                assert log.retention_start_offset == 0, kill_at
                got = [r.offset for r in log.scan(0)]
                assert set(kept) <= set(got) <= set(everything), kill_at
            compact_junk(path)                                 # the next compaction finishes it
            with CommitLog.open(path) as log:
                assert [r.offset for r in log.scan(0)] == kept, kill_at
                assert log.start_offset == bases[2] and log.retention_start_offset == 0
            shutil.rmtree(path)
