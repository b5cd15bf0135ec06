"""Damaged logs: torn or corrupt tails are truncated and reported, damage in an earlier segment is
a CorruptLogError naming the file, foreign files are left alone, zero-length last segments are
removed, and missing or damaged indexes are rebuilt."""

from __future__ import annotations

import logging
import os
import re

import pytest

from commitlog import CommitLog, CorruptLogError, OffsetRemovedError, UnsafeLogFileError, segment_name
from commitlog import record as rec
from commitlog.segments.index import INDEX_INTERVAL, index_path, read_checkpoints, read_sealed

from cl_helpers import append_deterministic, check_record, key_for, value_for

SEG = 16 * 1024
MAXV = 300


def _size(off: int) -> int:
    key = key_for(off)
    return rec.HEADER_SIZE + len(value_for(off, MAXV)) + (len(key) if key else 0)


def _build(path: str, n: int) -> list:
    with CommitLog.open(path, segment_size=SEG, flush="none") as log:
        for off in range(n):
            assert append_deterministic(log, off, MAXV) == off
        return log.segments()


def _flip(path: str, position: int, mask: int = 0x40) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        b = f.read(1)[0]
        f.seek(position)
        f.write(bytes([b ^ mask]))


def _reopen_capturing(path: str, caplog) -> tuple[CommitLog, list[str]]:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="commitlog"):
        log = CommitLog.open(path, flush="none")
    return log, [r.getMessage() for r in caplog.records]


def _check_all(log: CommitLog, end: int) -> None:
    assert log.end_offset == end
    got = [r.offset for r in log.scan()]
    assert got == list(range(log.start_offset, end))
    for r in log.scan():
        check_record(r, MAXV)


# ---------------------------------------------------------------------------- the tail
def test_truncates_corrupt_tail_and_reports_bytes(tmp_log_dir, caplog):
    segs = _build(tmp_log_dir, 120)
    last = segs[-1]
    n_last = last.record_count
    last_off = last.base_offset + n_last - 1
    start_of_last = last.used_bytes - _size(last_off)
    _flip(last.path, start_of_last + rec.HEADER_SIZE - 1)  # a byte of the last record's body
    log, messages = _reopen_capturing(tmp_log_dir, caplog)
    with log:
        [line] = [m for m in messages if "truncated" in m]
        assert f"truncated {_size(last_off)} bytes" in line and last.path in line
        assert f"at byte {start_of_last}" in line
        _check_all(log, last_off)  # every record before it stays
        assert log.append(b"after") == last_off
        assert log.read(last_off).value == b"after"
    with open(last.path, "rb") as f:  # no trace of the corrupt bytes after the new record
        f.seek(start_of_last + rec.HEADER_SIZE + 5)
        assert not any(f.read(_size(last_off)))


def test_truncates_torn_tail_and_reports_bytes(tmp_log_dir, caplog):
    segs = _build(tmp_log_dir, 120)
    last = segs[-1]
    last_off = last.base_offset + last.record_count - 1
    size = _size(last_off)
    start = last.used_bytes - size
    # A write torn after its frame and head: the rest of the record never reached the file.
    kept = rec.HEADER_SIZE + 3
    with open(last.path, "r+b") as f:
        f.seek(start)
        head = f.read(kept)
        f.seek(start + kept)
        f.write(bytes(size - kept))
    assert head[-1] != 0
    log, messages = _reopen_capturing(tmp_log_dir, caplog)
    with log:
        [line] = [m for m in messages if "truncated" in m]
        nonzero = len(head.rstrip(b"\0"))
        assert re.search(rf"truncated {nonzero} bytes .* at byte {start}", line), line
        _check_all(log, last_off)


def test_corrupt_record_in_the_middle_of_the_tail_is_the_only_one_lost(tmp_log_dir, caplog):
    """Records that verify after it are damage's survivors, not a torn tail: kept at their
    offsets (tests/adversary/test_store_damage_recovery.py probes the rest)."""
    segs = _build(tmp_log_dir, 120)
    last = segs[-1]
    offs = list(range(last.base_offset, last.base_offset + last.record_count))
    assert len(offs) >= 4
    victim = offs[-3]
    pos = last.used_bytes - sum(_size(o) for o in offs[offs.index(victim):])
    assert pos >= (read_checkpoints(index_path(last.path))[1] or [0])[-1], \
        "the victim must lie after the last recovery checkpoint"
    _flip(last.path, pos + 5)  # its CRC
    log, messages = _reopen_capturing(tmp_log_dir, caplog)
    with log:
        assert not [m for m in messages if "truncated" in m]
        [line] = [m for m in messages if "damaged" in m]
        assert f"at byte {pos}" in line and f"offset {victim}" in line
        end = last.base_offset + last.record_count
        assert log.end_offset == end
        assert [r.offset for r in log.scan()] == [o for o in range(log.start_offset, end) if o != victim]
        with pytest.raises(OffsetRemovedError):
            log.read(victim)


def test_clean_tail_reopens_without_warnings(tmp_log_dir, caplog):
    _build(tmp_log_dir, 120)
    log, messages = _reopen_capturing(tmp_log_dir, caplog)
    with log:
        assert messages == []
        _check_all(log, 120)


@pytest.mark.parametrize("readonly", [False, True], ids=["writer", "reader"])
def test_corruption_before_the_last_checkpoint_of_the_last_segment_is_reported(tmp_log_dir,
                                                                                readonly):
    """Recovery trusts what lies before its checkpoint; a later read still never returns the
    damaged record, and says where it is instead of pretending the log ends there. A read-only
    open (the last segment maybe still being written) knows records verified after it: the
    damaged one is not a record in flight."""
    with CommitLog.open(tmp_log_dir, segment_size=256 * 1024, flush="none") as log:
        for off in range(400):
            append_deterministic(log, off, MAXV)
        [seg] = log.segments()
    assert read_checkpoints(index_path(seg.path))[1], "needs checkpoints"
    _flip(seg.path, rec.HEADER_SIZE + 1)  # record 0, before every checkpoint
    with CommitLog.open(tmp_log_dir, flush="none", readonly=readonly) as log:
        assert log.end_offset == 400
        with pytest.raises(CorruptLogError, match=re.escape(seg.path)):
            log.read(0)
        with pytest.raises(CorruptLogError, match=re.escape(seg.path) + " at byte 0"):
            list(log.scan())
        check_record(log.read(399), MAXV)
        first_entry = read_checkpoints(index_path(seg.path))[0][0]
        assert [r.offset for r in log.scan(first_entry)] == list(range(first_entry, 400))


# ---------------------------------------------------------------------------- earlier segments
@pytest.mark.parametrize("readonly", [False, True])
def test_flipped_byte_in_an_earlier_segment_raises_naming_the_file(tmp_log_dir, readonly):
    segs = _build(tmp_log_dir, 200)
    assert len(segs) >= 3
    victim_seg = segs[1]
    victim = victim_seg.base_offset + 2
    pos = sum(_size(o) for o in range(victim_seg.base_offset, victim))
    _flip(victim_seg.path, pos + rec.HEADER_SIZE + 2)
    with CommitLog.open(tmp_log_dir, readonly=readonly) as log:
        with pytest.raises(CorruptLogError) as ei:
            log.read(victim)
        assert ei.value.path == victim_seg.path and ei.value.position == pos
        assert f"{victim_seg.path} at byte {pos}" in str(ei.value)
        seen = []
        with pytest.raises(CorruptLogError, match=re.escape(victim_seg.path)):
            for r in log.scan():
                seen.append(r.offset)
        assert seen == list(range(victim))  # everything before it, nothing after
        check_record(log.read(victim - 1), MAXV)
        # A record after it in the same index interval cannot be reached without trusting the
        # damaged record's length: an error too, never a guess.
        with pytest.raises(CorruptLogError):
            log.read(victim + 1)
        # From the next index entry on, and in the next segment, everything still verifies.
        after = victim_seg.base_offset + read_sealed(index_path(victim_seg.path)).rels[0]
        assert after > victim
        check_record(log.read(after), MAXV)
        assert [r.offset for r in log.scan(after, victim_seg.end_offset + 5)] == \
            list(range(after, victim_seg.end_offset + 5))


@pytest.mark.parametrize("size", [0, SEG // 2, SEG + 4096])
@pytest.mark.parametrize("readonly", [False, True])
def test_wrong_size_earlier_segment_fails_open_naming_the_file(tmp_log_dir, size, readonly):
    segs = _build(tmp_log_dir, 200)
    os.truncate(segs[1].path, size)
    with pytest.raises(CorruptLogError, match=re.escape(segs[1].path)) as ei:
        CommitLog.open(tmp_log_dir, readonly=readonly)
    assert str(SEG) in str(ei.value)


def test_shortened_last_segment_fails_open_naming_the_file(tmp_log_dir):
    segs = _build(tmp_log_dir, 200)
    os.truncate(segs[-1].path, segs[-1].used_bytes)
    with pytest.raises(CorruptLogError, match=re.escape(segs[-1].path)):
        CommitLog.open(tmp_log_dir)


def test_zero_length_last_segment_is_removed_on_open(tmp_log_dir, caplog):
    segs = _build(tmp_log_dir, 200)
    end = segs[-1].end_offset
    ghost = os.path.join(tmp_log_dir, segment_name(end))
    open(ghost, "wb").close()  # a crash while creating the next segment
    open(index_path(ghost), "wb").close()
    with CommitLog.open(tmp_log_dir, readonly=True) as log:  # readers cope before recovery
        assert log.end_offset == end
        assert [r.offset for r in log.scan()] == list(range(end))
    log, messages = _reopen_capturing(tmp_log_dir, caplog)
    with log:
        assert not os.path.exists(ghost) and not os.path.exists(index_path(ghost))
        assert any("zero-length" in m and ghost in m for m in messages)
        _check_all(log, end)
        assert append_deterministic(log, end, MAXV) == end
        _check_all(log, end + 1)


# ---------------------------------------------------------------------------- foreign files
def test_foreign_files_are_left_alone(tmp_log_dir, tmp_path):
    _build(tmp_log_dir, 200)
    outside = tmp_path / "outside.log"
    outside.write_bytes(b"precious")
    foreign = {
        "notes.txt": b"hello",
        "00000000000000000010.log.bak": b"backup",
        "0000000000000000001.log": b"19 digits",
        "00000000000000000042.LOG": b"upper case",
    }
    for name, data in foreign.items():
        with open(os.path.join(tmp_log_dir, name), "wb") as f:
            f.write(data)
    as_dir = os.path.join(tmp_log_dir, segment_name(99_999))
    os.mkdir(as_dir)
    with CommitLog.open(tmp_log_dir) as log:
        assert log.foreign_files() == [as_dir]
        _check_all(log, 200)
        assert append_deterministic(log, 200, MAXV) == 200
        while log.remove_head().status == "removed":
            pass
        assert len(log.segments()) == 1
        assert all(s.path != as_dir for s in log.segments())
    with CommitLog.open(tmp_log_dir, readonly=True) as log:
        assert log.foreign_files() == [as_dir]
        assert log.end_offset == 201
    for name, data in foreign.items():
        with open(os.path.join(tmp_log_dir, name), "rb") as f:
            assert f.read() == data
    assert os.path.isdir(as_dir)
    # A link at a segment's name is not left alone but refused (tests/adversary/test_symlinks_*).
    link = os.path.join(tmp_log_dir, segment_name(5))
    os.symlink(outside, link)
    with pytest.raises(UnsafeLogFileError, match=link):
        CommitLog.open(tmp_log_dir, readonly=True)
    assert os.path.islink(link) and outside.read_bytes() == b"precious"


# ---------------------------------------------------------------------------- indexes
def _count_decodes(monkeypatch) -> list[int]:
    calls = [0]
    real = rec.decode_at

    def counting(buf, position, limit):
        calls[0] += 1
        return real(buf, position, limit)
    monkeypatch.setattr(rec, "decode_at", counting)
    return calls


@pytest.mark.parametrize("damage", ["missing", "flipped", "truncated", "garbage"])
def test_missing_or_damaged_index_of_an_earlier_segment_is_rebuilt(tmp_log_dir, damage,
                                                                   monkeypatch):
    with CommitLog.open(tmp_log_dir, segment_size=256 * 1024, flush="none") as log:
        for off in range(4500):
            append_deterministic(log, off, MAXV)
        segs = log.segments()
    assert len(segs) >= 3
    ipath = index_path(segs[0].path)
    original = read_sealed(ipath)
    assert original is not None and len(original.rels) > 10
    if damage == "missing":
        os.unlink(ipath)
    elif damage == "flipped":
        _flip(ipath, 64 + 8 * 3 + 1)  # one entry
    elif damage == "truncated":
        os.truncate(ipath, 100)
    else:
        with open(ipath, "r+b") as f:
            f.write(os.urandom(64))
    assert read_sealed(ipath) is None
    with CommitLog.open(tmp_log_dir, flush="none") as log:
        target = segs[0].end_offset - 1  # the last record of the segment
        check_record(log.read(target), MAXV)  # works, rebuilding the index
        rebuilt = read_sealed(ipath)
        assert rebuilt is not None, "the index file was not rebuilt"
        assert (rebuilt.used_bytes, rebuilt.record_count, rebuilt.rels, rebuilt.positions,
                rebuilt.first_timestamp_ms, rebuilt.last_timestamp_ms) == \
            (original.used_bytes, original.record_count, original.rels, original.positions,
             original.first_timestamp_ms, original.last_timestamp_ms)
        calls = _count_decodes(monkeypatch)
        check_record(log.read(target - 1), MAXV)
        # From the nearest index entry, not from the start of the segment.
        assert calls[0] <= INDEX_INTERVAL // rec.HEADER_SIZE + 2
        assert [r.offset for r in log.scan(0, 20)] == list(range(20))
    with CommitLog.open(tmp_log_dir, readonly=True) as log:  # a reader uses the rebuilt file
        calls = _count_decodes(monkeypatch)
        check_record(log.read(segs[0].end_offset - 2), MAXV)
        assert calls[0] <= INDEX_INTERVAL // rec.HEADER_SIZE + 2


def test_missing_index_of_the_active_segment_is_recreated(tmp_log_dir, caplog):
    segs = _build(tmp_log_dir, 200)
    os.unlink(index_path(segs[-1].path))
    log, messages = _reopen_capturing(tmp_log_dir, caplog)
    with log:
        assert not [m for m in messages if "truncated" in m]
        _check_all(log, 200)
        assert os.path.exists(index_path(segs[-1].path))
        for off in range(200, 260):
            append_deterministic(log, off, MAXV)
        _check_all(log, 260)


def test_garbage_checkpoints_of_the_active_segment_are_not_trusted(tmp_log_dir, caplog):
    with CommitLog.open(tmp_log_dir, segment_size=256 * 1024, flush="none") as log:
        for off in range(500):
            append_deterministic(log, off, MAXV)
    ipath = index_path(os.path.join(tmp_log_dir, segment_name(0)))
    rels, positions = read_checkpoints(ipath)
    assert len(rels) > 5
    with open(ipath, "r+b") as f:  # the last checkpoints point into the middle of records
        f.seek(64 + 8 * (len(rels) - 2))
        f.write((rels[-2]).to_bytes(4, "little") + (positions[-2] + 3).to_bytes(4, "little"))
        f.write((rels[-1] + 1).to_bytes(4, "little") + (positions[-1] + 7).to_bytes(4, "little"))
    log, messages = _reopen_capturing(tmp_log_dir, caplog)
    with log:
        _check_all(log, 500)
        assert not [m for m in messages if "truncated" in m]



def test_stale_sealed_index_left_for_the_next_segment_is_not_trusted(tmp_log_dir):
    """A sealed index left over under the name of a segment about to be created (a crash while
    creating it earlier) must not describe the new segment to readers."""
    from commitlog.segments.index import SegmentSummary, write_sealed
    _build(tmp_log_dir, 200)
    with CommitLog.open(tmp_log_dir, flush="none") as log, \
            CommitLog.open(tmp_log_dir, readonly=True) as reader:
        while True:  # plant a stale index under each next base until the log rolls onto one
            planted = index_path(os.path.join(tmp_log_dir, segment_name(log.end_offset)))
            write_sealed(planted, SegmentSummary(0, 0, 0, 0, 0))
            before = len(log.segments())
            append_deterministic(log, log.end_offset, MAXV)
            if len(log.segments()) > before:
                break
            os.unlink(planted)
        for _ in range(3):
            append_deterministic(log, log.end_offset, MAXV)
        end = log.end_offset
        assert reader.end_offset == end
        assert [r.offset for r in reader.scan()][-1] == end - 1
        assert reader.segments()[-1].record_count == 4


def test_leftover_index_temporary_is_removed_by_the_writer_open(tmp_log_dir):
    segs = _build(tmp_log_dir, 200)
    tmp = index_path(segs[0].path) + ".tmp"  # a crash while rebuilding that index
    other = os.path.join(tmp_log_dir, "notes.index.tmp")
    for p in (tmp, other):
        with open(p, "wb") as f:
            f.write(b"half an index")
    with CommitLog.open(tmp_log_dir, readonly=True):
        assert os.path.exists(tmp)  # a reader never deletes: the writer may be rebuilding it
    with CommitLog.open(tmp_log_dir) as log:
        assert not os.path.exists(tmp) and os.path.exists(other)
        _check_all(log, 200)
