"""Time-based rolls (roll_after): a segment whose first record is that old is sealed short, its
unused tail given back, at the next append, by the writer's background thread when idle, or by
another process (commitlog.roll_idle) when no writer has the log open; what an open, a reader, a
removal and a crash make of a short sealed segment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import commitlog.log as log_module
from commitlog import (NOT_DUE, ROLLED, WRITER_OPEN, CommitLog, CorruptLogError, InvalidArgumentError,
                       LogLockedError, list_segments, roll_idle, segment_name)
from commitlog.locks import ROLLING, WriterLock
from commitlog.segments.index import read_sealed

SEGMENT = 64 * 1024
VALUE = b"v" * 100
FRAMED = 121                                   # VALUE with its record header
HOUR_NS = 3600 * 10**9


def _sizes(path) -> dict[int, int]:
    return {s.base_offset: s.size for s in list_segments(str(path)).segments}


def _wait(predicate, what: str, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def _run(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.fixture
def clock(monkeypatch):
    """The log module's clock, moved forward at will (the writer's thread reads it too)."""
    offset = [0]
    real = log_module._time_ns
    monkeypatch.setattr(log_module, "_time_ns", lambda: real() + offset[0])
    return offset


def test_an_append_after_roll_after_seals_the_segment_short_and_starts_the_next(tmp_path, clock):
    with CommitLog.open(tmp_path / "log", SEGMENT, roll_after=3600) as log:
        for _ in range(5):
            log.append(VALUE)
        assert _sizes(tmp_path / "log") == {0: SEGMENT}
        clock[0] = 2 * HOUR_NS
        assert log.append(b"next") == 5
        segments = log.segments()
        assert [(s.base_offset, s.size, s.active) for s in segments] == [(0, 5 * FRAMED + 4, False),
                                                                        (5, SEGMENT, True)]
        assert [log.read(i).value for i in range(5)] == [VALUE] * 5 and log.read(5).value == b"next"
    summary = read_sealed(str(tmp_path / "log" / segment_name(0)).replace(".log", ".index"))
    assert summary is not None and summary.compacted and summary.used_bytes == 5 * FRAMED


def test_an_idle_writer_is_rolled_by_its_background_thread_and_the_next_append_starts_a_segment(tmp_path):
    with CommitLog.open(tmp_path / "log", SEGMENT, roll_after=0.3, flush="none") as log:
        log.append_batch([VALUE] * 3)
        _wait(lambda: _sizes(tmp_path / "log") == {0: 3 * FRAMED + 4}, "the idle segment sealed short")
        assert log.end_offset == 3 and [s.active for s in log.segments()] == [False]
        assert log.append(VALUE) == 3
        assert sorted(_sizes(tmp_path / "log")) == [0, 3]


def test_no_roll_without_roll_after_or_before_it_is_due(tmp_path, clock):
    with CommitLog.open(tmp_path / "plain", SEGMENT) as log:
        log.append(VALUE)
        clock[0] = 100 * HOUR_NS
        log.append(VALUE)
        assert _sizes(tmp_path / "plain") == {0: SEGMENT}
    clock[0] = 0
    with CommitLog.open(tmp_path / "young", SEGMENT, roll_after=3600) as log:
        log.append(VALUE)
        clock[0] = HOUR_NS // 2
        log.append(VALUE)
        assert _sizes(tmp_path / "young") == {0: SEGMENT}


def test_records_with_old_timestamps_do_not_roll_a_segment_each(tmp_path):
    old = int(time.time() * 1000) - 86_400_000
    with CommitLog.open(tmp_path / "log", SEGMENT, roll_after=3600) as log:
        for i in range(20):
            log.append(VALUE, timestamp_ms=old + i)  # a backfill: the wall clock counts, not these
        assert len(log.segments()) == 1


@pytest.mark.parametrize("value", [0, -1, float("nan"), "1h", True])
def test_a_bad_roll_after_is_refused_naming_it(tmp_path, value):
    with pytest.raises(InvalidArgumentError, match="roll_after"):
        CommitLog.open(tmp_path / "log", SEGMENT, roll_after=value)
    assert not (tmp_path / "log").exists()


def test_a_reopened_log_continues_after_a_short_sealed_last_segment(tmp_path, clock):
    with CommitLog.open(tmp_path / "log", SEGMENT, roll_after=3600) as log:
        log.append_batch([VALUE] * 4)
        clock[0] = 2 * HOUR_NS
        log._flush_due()  # what the background thread does each second
        assert _sizes(tmp_path / "log") == {0: 4 * FRAMED + 4}
    with CommitLog.open(tmp_path / "log", readonly=True) as reader:
        assert reader.end_offset == 4 and [r.value for r in reader.scan()] == [VALUE] * 4
    with CommitLog.open(tmp_path / "log") as log:             # the writer's open: no recovery needed
        assert log.end_offset == 4 and log.append(b"after") == 4
    assert sorted(_sizes(tmp_path / "log")) == [0, 4]


def test_a_reader_tailing_the_segment_reads_across_the_roll(tmp_path, clock):
    with CommitLog.open(tmp_path / "log", SEGMENT, roll_after=3600) as log, \
            CommitLog.open(tmp_path / "log", readonly=True) as reader:
        log.append_batch([VALUE] * 3)
        log.flush()
        assert [r.offset for r in reader.scan()] == [0, 1, 2]
        clock[0] = 2 * HOUR_NS
        log.append(b"x")
        log.flush()
        assert reader.end_offset == 4
        assert [r.value for r in reader.scan()] == [VALUE] * 3 + [b"x"]  # the cut file, then the next


def test_a_short_sealed_last_segment_can_be_removed_and_the_log_starts_where_it_ended(tmp_path, clock):
    with CommitLog.open(tmp_path / "log", SEGMENT, roll_after=3600) as log:
        log.append_batch([VALUE] * 3)
        clock[0] = 2 * HOUR_NS
        log._flush_due()
        with CommitLog.open(tmp_path / "log", readonly=True) as cleaner:
            result = cleaner.remove_head()
            assert result.status == "removed" and result.new_start_offset == 3
            assert cleaner.start_offset == cleaner.end_offset == 3
        assert list_segments(str(tmp_path / "log")).bases == ()
        assert log.append(b"y") == 3                           # the writer carries on at the end
    with CommitLog.open(tmp_path / "log", readonly=True) as reader:
        assert reader.start_offset == 3 and [r.offset for r in reader.scan()] == [3]


def test_an_unsealed_last_segment_is_never_removed(tmp_path):
    with CommitLog.open(tmp_path / "log", SEGMENT) as log:
        log.append_batch([VALUE] * 3)
        with CommitLog.open(tmp_path / "log", readonly=True) as cleaner:
            assert cleaner.remove_head().status == "active"
        assert log.end_offset == 3


def test_roll_idle_seals_a_log_no_writer_has_open(tmp_path):
    with CommitLog.open(tmp_path / "log", SEGMENT) as log:
        log.append_batch([VALUE] * 2)
    now = time.time_ns()
    assert roll_idle(tmp_path / "log", 3600, now_ns=now) == NOT_DUE          # an hour not yet passed
    assert roll_idle(tmp_path / "log", 3600, now_ns=now + 2 * HOUR_NS) == ROLLED
    assert _sizes(tmp_path / "log") == {0: 2 * FRAMED + 4}
    assert roll_idle(tmp_path / "log", 3600, now_ns=now + 2 * HOUR_NS) == NOT_DUE  # sealed already
    data_files = [n for n in os.listdir(tmp_path / "log") if n.endswith((".log", ".index")) or "prepared" in n]
    assert sorted(data_files) == ["00000000000000000000.index", "00000000000000000000.log"]  # none prepared
    with CommitLog.open(tmp_path / "log") as log:
        assert log.append(VALUE) == 2


def test_roll_idle_leaves_a_log_with_a_writer_open_in_another_process_to_it(tmp_path):
    path = tmp_path / "log"
    writer = _run(f"""
        import time
        from commitlog import CommitLog
        log = CommitLog.open({str(path)!r}, {SEGMENT})
        log.append_batch([b"w" * 100] * 2)
        print("open", flush=True)
        time.sleep(30)
    """)
    try:
        assert writer.stdout.readline().strip() == "open"
        assert roll_idle(path, 1, now_ns=time.time_ns() + 2 * HOUR_NS) == WRITER_OPEN
        assert _sizes(path) == {0: SEGMENT}
    finally:
        writer.kill()
        writer.wait()


def test_a_writer_opening_during_a_roll_waits_for_it_and_a_second_writer_still_fails(tmp_path):
    path = tmp_path / "log"
    with CommitLog.open(path, SEGMENT) as log:
        log.append(VALUE)
    rolling = WriterLock(str(path), note=ROLLING)             # what roll_idle holds for milliseconds
    opened: list[float] = []
    started = time.monotonic()

    def open_writer():
        with CommitLog.open(path) as log:
            opened.append(time.monotonic() - started)
            log.append(VALUE)

    thread = threading.Thread(target=open_writer)
    thread.start()
    time.sleep(0.3)
    assert not opened                                          # waiting, not failed
    rolling.release()
    thread.join(10)
    assert opened and opened[0] >= 0.3
    with CommitLog.open(path) as log:                          # an ordinary writer holds it now
        blocked = time.monotonic()
        with pytest.raises(LogLockedError):
            CommitLog.open(path)
        assert time.monotonic() - blocked < 1.0                # refused at once, as before
        assert log.end_offset == 2


def test_a_kill_between_the_seal_and_the_cut_is_finished_by_the_next_writer(tmp_path):
    path = tmp_path / "log"
    child = _run(f"""
        import os, signal
        import commitlog.segments.active as active
        from commitlog import CommitLog
        log = CommitLog.open({str(path)!r}, {SEGMENT}, roll_after=3600)
        log.append_batch([b"v" * 100] * 6)
        active.os.ftruncate = lambda fd, size: os.kill(os.getpid(), signal.SIGKILL)
        log._writer.seal_by_time(0)
    """)
    child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL
    assert _sizes(path) == {0: SEGMENT}                        # sealed, not cut
    with CommitLog.open(path, readonly=True) as reader:        # a reader takes it as sealed
        assert reader.end_offset == 6 and [s.active for s in reader.segments()] == [False]
    with CommitLog.open(path) as log:
        assert _sizes(path) == {0: 6 * FRAMED + 4}             # the writer's open cut it
        assert [r.value for r in log.scan()] == [VALUE] * 6 and log.append(b"z") == 6


def test_a_short_sealed_segment_whose_index_was_lost_is_recognised_by_its_data(tmp_path, clock):
    path = tmp_path / "log"
    with CommitLog.open(path, SEGMENT, roll_after=3600) as log:
        log.append_batch([VALUE] * 4)
        clock[0] = 2 * HOUR_NS
        log._flush_due()
    os.unlink(path / "00000000000000000000.index")
    with CommitLog.open(path, readonly=True) as reader:
        assert [r.offset for r in reader.scan()] == [0, 1, 2, 3]
    with CommitLog.open(path) as log:
        assert read_sealed(str(path / "00000000000000000000.index")).compacted  # written back
        assert log.append(VALUE) == 4


@pytest.mark.parametrize("damage", ["torn", "garbage-end"])
def test_a_short_last_file_that_is_not_a_complete_segment_is_refused(tmp_path, damage):
    path = tmp_path / "log"
    with CommitLog.open(path, SEGMENT) as log:
        log.append_batch([VALUE] * 4)
    seg = path / "00000000000000000000.log"
    os.unlink(path / "00000000000000000000.index")
    with open(seg, "r+b") as f:
        if damage == "torn":
            f.truncate(2 * FRAMED + 50)                        # cut inside a record
        else:
            f.truncate(4 * FRAMED + 4)
            f.seek(4 * FRAMED)
            f.write(b"\x01\x02\x03\x04")                       # not an end marker
    for readonly in (False, True):
        with pytest.raises(CorruptLogError, match="not a complete"):
            CommitLog.open(path, readonly=readonly)
