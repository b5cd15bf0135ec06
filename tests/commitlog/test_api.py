"""The public API of CommitLog: appending, reading, scanning, segments, rolling, flushing,
consumer commits, the writer lock and read-only opens."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from commitlog import (ATTR_CONTROL, ATTR_DEAD, DEFAULT_SEGMENT_SIZE, CommitLog, InvalidCommitError,
                       LogClosedError, LogLockedError, OffsetOutOfRangeError, OffsetRemovedError,
                       ReadOnlyLogError,
                       Record, RecordTooLargeError, SegmentInfo, SegmentSizeMismatchError,
                       segment_name)
from commitlog import record as rec

from cl_helpers import append_deterministic, check_record, child_env

SEG = 64 * 1024


def test_append_read_and_offsets(tmp_log_dir):
    with CommitLog.open(tmp_log_dir, segment_size=SEG) as log:
        assert (log.start_offset, log.end_offset) == (0, 0)
        assert log.append(b"one") == 0
        assert log.append(b"two", key=b"k", timestamp_ms=42, attributes=ATTR_DEAD) == 1
        assert log.append(b"", key=b"") == 2
        assert log.append_batch([b"a", b"b", b"c"], timestamp_ms=7) == 3
        assert log.append_batch([]) == 6
        assert log.append_batch(iter([b"d", b"e"]), keys=[b"x", None],
                                attributes=ATTR_CONTROL) == 6
        assert (log.start_offset, log.end_offset) == (0, 8)
        now_ms = time.time() * 1000
        r0 = log.read(0)
        assert isinstance(r0, Record) and r0.value == b"one" and r0.key is None
        assert abs(r0.timestamp_ms - now_ms) < 60_000
        with pytest.raises(OffsetRemovedError, match="offset 1 .* next offset that still exists is 2"):
            log.read(1)  # written dead: readers never return it
        assert log.read(2).key == b"" and log.read(2).value == b""
        assert [r.value for r in log.scan(3, 6)] == [b"a", b"b", b"c"]
        assert {r.timestamp_ms for r in log.scan(3, 6)} == {7}
        assert log.read(6) == (6, log.read(6).timestamp_ms, b"x", b"d", ATTR_CONTROL)
        assert log.read(7).key is None
        assert [r.offset for r in log.scan()] == [0] + list(range(2, 8))
        assert [r.offset for r in log.scan(1)] == list(range(2, 8))
        assert [r.offset for r in log.scan(5)] == [5, 6, 7]
        assert list(log.scan(8)) == [] and list(log.scan(100)) == []
        assert list(log.scan(2, 2)) == []
        it = log.scan()
        assert next(it).offset == 0 and next(it).offset == 2
        assert [r.offset for r in it] == list(range(3, 8))  # a for-loop goes on from there
        with pytest.raises(StopIteration):
            next(it)
        for bad in (8, 9, -1):
            with pytest.raises(OffsetOutOfRangeError):
                log.read(bad)


def test_scan_zero_copy_yields_views(tmp_log_dir):
    with CommitLog.open(tmp_log_dir, segment_size=SEG) as log:
        log.append_batch([b"v%d" % i for i in range(10)])
        got = [bytes(r.value) for r in log.scan(zero_copy=True)]
        assert got == [b"v%d" % i for i in range(10)]
        first = next(iter(log.scan(zero_copy=True)))
        assert isinstance(first.value, memoryview)


def test_default_segment_size_and_meta(tmp_log_dir):
    with CommitLog.open(tmp_log_dir) as log:
        log.append(b"x")
        assert log.segment_size == DEFAULT_SEGMENT_SIZE
        [seg] = log.segments()
        assert seg.size == DEFAULT_SEGMENT_SIZE == os.path.getsize(seg.path)


def test_segments_fields_and_rolling(tmp_log_dir):
    with CommitLog.open(tmp_log_dir, segment_size=4096, flush="none") as log:
        value = b"v" * 979  # 1000 bytes framed: four fit in a segment, the fifth rolls
        for i in range(10):
            log.append(value, timestamp_ms=1000 + i)
        segs = log.segments()
        assert [s.base_offset for s in segs] == [0, 4, 8]
        assert all(isinstance(s, SegmentInfo) for s in segs)
        assert [s.record_count for s in segs] == [4, 4, 2]
        assert [s.active for s in segs] == [False, False, True]
        assert [s.used_bytes for s in segs] == [4000, 4000, 2000]
        assert all(s.size == 4096 for s in segs)
        assert [(s.first_timestamp_ms, s.last_timestamp_ms) for s in segs] == \
            [(1000, 1003), (1004, 1007), (1008, 1009)]
        assert [s.end_offset for s in segs] == [4, 8, 10]
        assert [log.segment_end_offset(s.base_offset) for s in segs] == [4, 8, 10]
        assert segs[0].path == os.path.join(log.path, segment_name(0))
        assert os.path.basename(segs[1].path) == "00000000000000000004.log"
        assert abs(segs[0].mtime - time.time()) < 60
        # The sealed segment's unused tail starts with the end marker.
        with open(segs[0].path, "rb") as f:
            data = f.read()
        assert int.from_bytes(data[4000:4004], "little") == rec.END_MARKER
        assert not any(data[4004:])
        # A record that exactly fills what is left still goes in the current segment.
        log.append(b"w" * (4096 - 2000 - rec.HEADER_SIZE))
        assert log.segments()[-1].base_offset == 8 and log.segments()[-1].used_bytes == 4096
        assert log.append(b"next") == 11
        assert log.segments()[-1].base_offset == 11
        assert [r.offset for r in log.scan()] == list(range(12))
    with CommitLog.open(tmp_log_dir, readonly=True) as log:
        assert [s.record_count for s in log.segments()] == [4, 4, 3, 1]
        assert [r.offset for r in log.scan()] == list(range(12))
        assert log.read(10).value == b"w" * (4096 - 2000 - rec.HEADER_SIZE)


def test_record_larger_than_a_segment_is_refused(tmp_log_dir):
    with CommitLog.open(tmp_log_dir, segment_size=4096) as log:
        log.append(b"small")
        with pytest.raises(RecordTooLargeError, match="4096"):
            log.append(b"x" * (4096 - rec.HEADER_SIZE + 1))
        with pytest.raises(RecordTooLargeError):
            log.append(b"x" * 10, key=b"k" * (4096 - rec.HEADER_SIZE - 9))
        with pytest.raises(RecordTooLargeError):
            log.append_batch([b"x" * 5000])
        assert log.end_offset == 1
        assert log.append(b"x" * (4096 - rec.HEADER_SIZE)) == 1  # exactly a segment fits
        assert log.read(1).value == b"x" * (4096 - rec.HEADER_SIZE)
        assert [r.offset for r in log.scan()] == [0, 1]


def test_large_records_round_trip_across_rolls(tmp_log_dir):
    with CommitLog.open(tmp_log_dir, segment_size=256 * 1024, flush="none") as log:
        values = [bytes([i]) * (64 * 1024 + i * 1000) for i in range(12)]
        for i, v in enumerate(values):
            assert log.append(v, key=b"big%d" % i if i % 2 else None) == i
        log.append_batch(values[:3])
        assert [bytes(r.value) for r in log.scan()] == values + values[:3]
        assert log.read(5).key == b"big5"
        assert len(log.segments()) > 3


def test_reopen_with_another_segment_size_raises(tmp_log_dir):
    with CommitLog.open(tmp_log_dir, segment_size=SEG) as log:
        log.append(b"x")
    with pytest.raises(SegmentSizeMismatchError, match=str(SEG)):
        CommitLog.open(tmp_log_dir, segment_size=2 * SEG)
    with CommitLog.open(tmp_log_dir, segment_size=SEG) as log:  # the same size is fine
        assert log.end_offset == 1
    with CommitLog.open(tmp_log_dir) as log:  # None means "whatever it was created with"
        assert log.segment_size == SEG
        assert log.append(b"y") == 1


@pytest.mark.parametrize("kwargs", [
    {"segment_size": 100}, {"segment_size": 2**33}, {"segment_size": 4096.0},
    {"flush": "always"}, {"flush_interval": 0}, {"on_full": "wait"}, {"block_timeout": -1},
    {"refuse_writes_ratio": 1.5}, {"refuse_writes_ratio": 0.8, "resume_ratio": 0.9},
])
def test_bad_open_arguments_are_rejected(tmp_log_dir, kwargs):
    with pytest.raises(ValueError):
        CommitLog.open(tmp_log_dir, **kwargs)
    assert not os.path.exists(tmp_log_dir)  # nothing created


def test_constructor_is_not_public():
    with pytest.raises(TypeError):
        CommitLog("somewhere")


def _flush_calls(monkeypatch):
    """Record every flush of the active segment (the msync the flush modes decide about)."""
    from commitlog.segments import active as segmod
    calls = []
    orig = segmod.ActiveSegment.flush

    def spy(self):
        calls.append(self.position)
        return orig(self)
    monkeypatch.setattr(segmod.ActiveSegment, "flush", spy)
    return calls


def test_flush_sync_flushes_every_append(tmp_log_dir, monkeypatch):
    calls = _flush_calls(monkeypatch)
    with CommitLog.open(tmp_log_dir, segment_size=SEG, flush="sync") as log:
        log.append(b"a")
        log.append(b"b")
        log.append_batch([b"c", b"d"])
        assert len(calls) == 3
        assert log.segments()[-1].used_bytes == calls[-1]


def test_flush_async_flushes_in_the_background(tmp_log_dir, monkeypatch):
    calls = _flush_calls(monkeypatch)
    with CommitLog.open(tmp_log_dir, segment_size=SEG, flush="async", flush_interval=0.05) as log:
        log.append(b"a")
        assert calls == []  # not on the append path
        deadline = time.monotonic() + 5
        while not calls and time.monotonic() < deadline:
            time.sleep(0.01)
        assert calls, "the background flusher never ran"
        n = len(calls)
        time.sleep(0.2)
        assert len(calls) == n  # nothing new written: nothing flushed again
        log.append(b"b")
        log.flush()  # on demand
        assert len(calls) > n


def test_flush_none_leaves_it_to_the_os(tmp_log_dir, monkeypatch):
    calls = _flush_calls(monkeypatch)
    with CommitLog.open(tmp_log_dir, segment_size=SEG, flush="none") as log:
        for i in range(100):
            log.append(b"x%d" % i)
        time.sleep(0.05)
        assert calls == []
        log.flush()
        assert len(calls) == 1
        assert [r.offset for r in log.scan()] == list(range(100))


def test_commit_committed_and_commit_times(tmp_log_dir):
    with CommitLog.open(tmp_log_dir, segment_size=SEG) as log:
        log.append_batch([b"x"] * 10)
        assert log.committed() == {} and log.commit_times() == {}
        before = time.time()
        log.commit("etl", 4)
        log.commit("audit", 10)  # == end_offset: everything consumed
        log.commit("etl", 7)
        assert log.committed() == {"audit": 10, "etl": 7}
        times = log.commit_times()
        assert set(times) == {"audit", "etl"}
        assert before - 1 <= times["etl"] <= time.time() + 1
        with pytest.raises(InvalidCommitError, match="end offset 10"):
            log.commit("etl", 11)
        with pytest.raises(InvalidCommitError):
            log.commit("etl", -1)
        with pytest.raises(ValueError):  # InvalidCommitError is a ValueError too
            log.commit("", 1)
        assert log.committed() == {"audit": 10, "etl": 7}
    with CommitLog.open(tmp_log_dir, readonly=True) as log:  # persisted, visible read-only
        assert log.committed() == {"audit": 10, "etl": 7}
        log.commit("reader", 3)  # a read-only open may commit consumer progress
    with CommitLog.open(tmp_log_dir) as log:
        assert log.committed()["reader"] == 3


def test_second_writer_gets_log_locked_error_naming_the_pid(tmp_log_dir):
    with CommitLog.open(tmp_log_dir, segment_size=SEG) as log:
        log.append(b"x")
        code = ("import sys\nfrom commitlog import CommitLog, LogLockedError\n"
                "try:\n    CommitLog.open(sys.argv[1])\nexcept LogLockedError as e:\n"
                "    print(e.holder_pid, e)\n")
        out = subprocess.run([sys.executable, "-c", code, tmp_log_dir], capture_output=True,
                             text=True, env=child_env(), timeout=60)
        pid, message = out.stdout.split(" ", 1)
        assert int(pid) == os.getpid()
        assert f"pid {os.getpid()}" in message
        with pytest.raises(LogLockedError):  # a second writer in this process too
            CommitLog.open(tmp_log_dir)
        with CommitLog.open(tmp_log_dir, readonly=True) as reader:  # readers are fine
            assert reader.read(0).value == b"x"
    with CommitLog.open(tmp_log_dir) as log:  # released on close
        assert log.append(b"y") == 1


def test_writer_lock_is_released_when_the_writer_dies(tmp_log_dir):
    code = ("import sys, os, signal\nfrom commitlog import CommitLog\n"
            "log = CommitLog.open(sys.argv[1], 65536)\nlog.append(b'x')\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n")
    proc = subprocess.run([sys.executable, "-c", code, tmp_log_dir], env=child_env(), timeout=60)
    assert proc.returncode == -9
    with CommitLog.open(tmp_log_dir) as log:
        assert log.end_offset == 1


def test_lock_is_not_inherited_by_exec_children(tmp_log_dir):
    """A writer that starts a subprocess must not leave the lock held by that child."""
    with CommitLog.open(tmp_log_dir, segment_size=SEG) as log:
        log.append(b"x")
        child = subprocess.Popen(["sleep", "30"], close_fds=False)
    try:
        with CommitLog.open(tmp_log_dir) as log:
            assert log.end_offset == 1
    finally:
        child.kill()
        child.wait()


def test_readonly_open_cannot_append(tmp_log_dir):
    with pytest.raises(FileNotFoundError):
        CommitLog.open(tmp_log_dir, readonly=True)  # not a log (yet): never created read-only
    assert not os.path.exists(tmp_log_dir)
    with CommitLog.open(tmp_log_dir, segment_size=SEG) as log:
        log.append(b"x")
    with CommitLog.open(tmp_log_dir, readonly=True) as log:
        with pytest.raises(ReadOnlyLogError):
            log.append(b"y")
        with pytest.raises(ReadOnlyLogError):
            log.append_batch([b"y"])
        assert log.end_offset == 1 and log.read(0).value == b"x"
        assert log.segment_size == SEG


def test_readonly_sees_a_live_writer(tmp_log_dir):
    with CommitLog.open(tmp_log_dir, segment_size=4096, flush="none") as log, \
            CommitLog.open(tmp_log_dir, readonly=True) as reader:
        for i in range(100):
            append_deterministic(log, i, 200)
        assert reader.end_offset == 100
        for r in reader.scan():
            check_record(r, 200)
        assert [r.offset for r in reader.scan(40)] == list(range(40, 100))
        append_deterministic(log, 100, 200)
        check_record(reader.read(100), 200)
        assert [s.base_offset for s in reader.segments()] == \
            [s.base_offset for s in log.segments()]


def test_closed_log_refuses_operations(tmp_log_dir):
    log = CommitLog.open(tmp_log_dir, segment_size=SEG)
    log.append(b"x")
    log.close()
    log.close()  # idempotent
    for op in (lambda: log.append(b"y"), lambda: log.read(0), lambda: log.scan(),
               lambda: log.end_offset, lambda: log.segments(), lambda: log.commit("g", 0),
               lambda: log.flush()):
        with pytest.raises(LogClosedError):
            op()


def test_appends_from_many_threads_are_serialised(tmp_log_dir):
    with CommitLog.open(tmp_log_dir, segment_size=16 * 1024, flush="none") as log:
        got: list[int] = []

        def work(t):
            for i in range(300):
                got.append(log.append(b"t%d-%d" % (t, i)))
                if i % 50 == 0:
                    log.append_batch([b"b"] * 5)
        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(set(got)) == len(got) == 1200
        assert [r.offset for r in log.scan()] == list(range(log.end_offset))
        assert log.end_offset == 1200 + 4 * 6 * 5


@pytest.mark.parametrize("sizes", [[0] * 3000, [1] * 5000, [100] * 40_000, [4000] * 700,
                                   [70_000] * 40, [(1 << 20) + 5000] * 6,
                                   [(i * 37) % 500 for i in range(20_000)]],
                         ids=["empty", "1B", "100B", "4000B", "70KB", "over-a-chunk", "mixed"])
def test_append_batch_writes_the_same_bytes_as_single_appends(tmp_path, sizes):
    """The batch paths (uniform sizes: strided CRCs; mixed sizes: map/join) lay out segments and
    their sparse indexes exactly as one append per record does, across rolls."""
    from commitlog.segments.index import index_path, read_checkpoints, read_sealed
    values = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
    logs = {}
    for how in ("batch", "single"):
        path = str(tmp_path / how)
        with CommitLog.open(path, segment_size=4 << 20, flush="none") as log:
            log.append(b"x" * 33, timestamp_ms=77)  # start off any alignment
            if how == "batch":
                half = len(values) // 2
                assert log.append_batch(values[:half], timestamp_ms=77, attributes=ATTR_DEAD) == 1
                log.append_batch(values[half:], timestamp_ms=77, attributes=ATTR_DEAD)
            else:
                for v in values:
                    log.append(v, timestamp_ms=77, attributes=ATTR_DEAD)
            assert log.end_offset == len(values) + 1
            logs[how] = log.segments()
            assert list(log.scan(1)) == []  # written dead: never returned
    assert [s.base_offset for s in logs["batch"]] == [s.base_offset for s in logs["single"]]
    for a, b in zip(logs["batch"], logs["single"]):
        assert (a.used_bytes, a.record_count) == (b.used_bytes, b.record_count)
        with open(a.path, "rb") as fa, open(b.path, "rb") as fb:
            assert fa.read() == fb.read(), f"segment {a.base_offset} differs"
        sa, sb = read_sealed(index_path(a.path)), read_sealed(index_path(b.path))
        if sa is None:
            assert read_checkpoints(index_path(a.path)) == read_checkpoints(index_path(b.path))
        else:
            assert (sa.rels, sa.positions) == (sb.rels, sb.positions)
