"""Preparing segments ahead of the writer (commitlog/segments/prealloc.py): real files
and mappings in a temporary directory. Where a test must catch the worker mid-preparation, the
real prefault runs behind a gate the test opens."""

from __future__ import annotations

import mmap
import os
import threading
import time

import pytest

from commitlog import CommitLog
from commitlog.segments import prealloc as prealloc_module
from commitlog.segments.index import index_file_size
from commitlog.layout import PREALLOC_PREFIX, segment_name
from commitlog.segments.prealloc import SegmentPreallocator

SIZE = 1 << 20


def _prepared_files(directory: str) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.startswith(PREALLOC_PREFIX))


@pytest.fixture
def gate(monkeypatch):
    """Holds every preparation before its prefault until the test sets the event (a cancelled
    preparation is let go, as the real prefault would stop between steps)."""
    event = threading.Event()
    real = prealloc_module.prefault_writable

    def gated(mapping, size, cancelled=lambda: False):
        while not event.wait(0.01):
            if cancelled():
                return False
        return real(mapping, size, cancelled)

    monkeypatch.setattr(prealloc_module, "prefault_writable", gated)
    return event


def test_prepares_the_first_segment_of_a_new_log_at_open(tmp_path):
    path = str(tmp_path / "log")
    with CommitLog.open(path, SIZE, flush="none") as log:
        log._parts.preallocator.wait_idle()
        assert _prepared_files(path) == [f"{PREALLOC_PREFIX}0.index", f"{PREALLOC_PREFIX}0.log"]
        prepared_inode = os.stat(os.path.join(path, f"{PREALLOC_PREFIX}0.log")).st_ino
        log.append(b"first")
        # The first segment is the prepared file, renamed, and its index the prepared index.
        assert os.stat(os.path.join(path, segment_name(0))).st_ino == prepared_inode
        assert os.path.getsize(os.path.join(path, segment_name(0))) == SIZE
        assert os.path.getsize(os.path.join(path, segment_name(0)[:-4] + ".index")) == \
            index_file_size(SIZE)
    assert _prepared_files(path) == []


def test_reopening_a_log_with_segments_does_not_prepare_until_a_roll(tmp_path):
    path = str(tmp_path / "log")
    with CommitLog.open(path, SIZE, flush="none") as log:
        log.append(b"x")
    with CommitLog.open(path, flush="none") as log:
        log._parts.preallocator.wait_idle()
        assert _prepared_files(path) == []
        assert log.read(0).value == b"x"


def test_rolls_read_back_through_prepared_indexes(tmp_path):
    path = str(tmp_path / "log")
    value = os.urandom(3000)
    with CommitLog.open(path, 64 * 1024, flush="none") as log:
        for _ in range(200):  # about ten rolls, each onto a prepared segment
            log.append(value)
        assert len(log.segments()) >= 9
    with CommitLog.open(path, readonly=True) as log:
        assert [r.offset for r in log.scan(0, 200)] == list(range(200))
        assert log.read(137).value == value


def _use(prepared) -> None:
    """What a roll does with a prepared segment, short of renaming it: it leaves the pool."""
    assert prepared is not None
    prepared.close()
    os.unlink(prepared.path)
    os.unlink(prepared.index_path)


def test_keeps_two_segments_ready_once_the_writer_has_waited(tmp_path, gate):
    directory = str(tmp_path)
    pre = SegmentPreallocator(directory, SIZE)
    try:
        pre.request()
        threading.Timer(0.2, gate.set).start()
        _use(pre.take())  # a new log's first segment: waiting for it is expected
        pre.request()
        pre.wait_idle()
        assert len(_prepared_files(directory)) == 2  # one segment (and its index) ahead

        gate.clear()
        _use(pre.take())  # ready: no wait
        pre.request()
        threading.Timer(0.2, gate.set).start()
        _use(pre.take())  # the writer outran the preparation
        pre.request()
        pre.wait_idle()
        assert len(_prepared_files(directory)) == 4  # now two ahead
    finally:
        gate.set()
        pre.discard()
    assert _prepared_files(directory) == []


def test_retired_mappings_are_closed_in_the_background(tmp_path):
    path = str(tmp_path / "file")
    with open(path, "wb") as f:
        f.truncate(SIZE)
    fd = os.open(path, os.O_RDWR)
    mapping = mmap.mmap(fd, SIZE)
    os.close(fd)
    pre = SegmentPreallocator(str(tmp_path), SIZE)
    pre.retire(mapping)
    pre.wait_idle()
    assert mapping.closed
    pre.discard()


def test_closing_stops_a_preparation_in_progress_and_removes_its_files(tmp_path, gate):
    path = str(tmp_path / "log")
    log = CommitLog.open(path, SIZE, flush="none")
    deadline = time.monotonic() + 5
    while not _prepared_files(path):  # created, then held at the gate before faulting in
        assert time.monotonic() < deadline, "the preparation never started"
        time.sleep(0.01)
    closer = threading.Thread(target=log.close)
    closer.start()
    closer.join(5)
    assert not closer.is_alive(), "close waited for a preparation that was told to stop"
    assert _prepared_files(path) == []


def test_a_crash_leftover_is_set_aside_at_open_and_removed(tmp_path):
    path = str(tmp_path / "log")
    with CommitLog.open(path, SIZE, flush="none") as log:
        log.append(b"x")
    leftover = os.path.join(path, f"{PREALLOC_PREFIX}7.log")
    with open(leftover, "wb") as f:
        f.write(b"not trusted")
    with CommitLog.open(path, flush="none") as log:
        assert not os.path.exists(leftover)
        log.append(os.urandom(SIZE // 2))
        log.append(os.urandom(SIZE // 2))  # a roll: the preparation removes the set-aside file
        log._parts.preallocator.wait_idle()
        assert not any(n.endswith(".stale") for n in os.listdir(path))
        assert log.read(0).value == b"x"


def test_prepares_nothing_while_reserving_would_cross_the_line(tmp_path):
    asked = []
    allow = [False]

    def may_reserve(nbytes):
        asked.append(nbytes)
        return allow[0]
    pre = SegmentPreallocator(str(tmp_path), SIZE, may_reserve)
    pre.request()
    pre.wait_idle()
    assert asked == [SIZE + index_file_size(SIZE)]
    assert _prepared_files(str(tmp_path)) == []
    assert pre.take() is None  # the roll allocates its segment itself
    allow[0] = True
    pre.request()
    pre.wait_idle()
    assert len(_prepared_files(str(tmp_path))) == 2  # a segment and its index
    pre.discard()


def test_release_ready_removes_what_was_prepared_but_not_taken(tmp_path):
    pre = SegmentPreallocator(str(tmp_path), SIZE)
    pre.request()
    pre.wait_idle()
    assert len(_prepared_files(str(tmp_path))) == 2
    assert pre.release_ready() == 1
    assert _prepared_files(str(tmp_path)) == []
    assert pre.take() is None
    assert pre.release_ready() == 0
    pre.discard()
