"""The end of another process's active segment, kept between calls (commitlog.segments.last_segment_end): never
stale after an append in another process returned, nor after the file was replaced or sealed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

from commitlog import CommitLog

_APPENDER = textwrap.dedent("""
    import sys
    from commitlog import CommitLog
    log = CommitLog.open(sys.argv[1], segment_size=1 << 20, flush="none")
    for line in sys.stdin:
        size, count = map(int, line.split())
        log.append_batch([b"v" * size] * count)
        print(log.end_offset, flush=True)
    log.close()
""")


def test_an_append_in_another_process_is_seen_at_once(tmp_log_dir):
    with CommitLog.open(tmp_log_dir, segment_size=1 << 20, flush="none") as w:
        w.append(b"first")
    child = subprocess.Popen([sys.executable, "-c", _APPENDER, tmp_log_dir], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        with CommitLog.open(tmp_log_dir, readonly=True) as log:
            base = log.segments()[-1].base_offset
            assert log.segment_end_offset(base) == 1
            # Sizes around the compared tail (32 bytes) and across index checkpoints (4 KiB).
            for size, count in [(1, 1), (0, 1), (40, 1), (5000, 3), (7, 200), (31, 1), (33, 2)] * 4:
                assert log.segment_end_offset(base) == log.segment_end_offset(base)  # kept
                child.stdin.write(f"{size} {count}\n")
                child.stdin.flush()
                end = int(child.stdout.readline())
                assert log.segment_end_offset(base) == end
                assert log.segments()[-1].record_count == end - base
    finally:
        child.stdin.close()
        child.wait(30)
    assert child.returncode == 0


def test_a_log_replaced_under_an_open_reader_is_read_afresh(tmp_path):
    path = str(tmp_path / "log")
    other = str(tmp_path / "other")
    for where, n in ((path, 50), (other, 20)):
        with CommitLog.open(where, segment_size=1 << 20, flush="none") as w:
            w.append_batch([b"r" * 64] * n)
    with CommitLog.open(path, readonly=True) as log:
        assert log.segment_end_offset(0) == 50
        seg = os.path.join(path, f"{0:020d}.log")
        os.unlink(seg)
        shutil.copy2(os.path.join(other, f"{0:020d}.log"), seg)  # same base, fewer records
        assert log.segment_end_offset(0) == 20


def test_a_segment_sealed_at_a_roll_ends_where_its_index_says(tmp_log_dir):
    with CommitLog.open(tmp_log_dir, segment_size=4096, flush="none") as w, \
            CommitLog.open(tmp_log_dir, readonly=True) as r:
        w.append_batch([b"r" * 100] * 5)
        assert r.segment_end_offset(0) == 5
        while len(w.segments()) < 2:
            w.append(b"r" * 100)
        sealed_end = w.segments()[1].base_offset
        assert r.segment_end_offset(0) == sealed_end
        assert r.segment_end_offset(sealed_end) == w.end_offset
