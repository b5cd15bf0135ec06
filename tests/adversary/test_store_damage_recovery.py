"""Probes: damage in the active segment found by a writer's open after a SIGKILL.

A record that does not verify, with records after it that do, is damage, not a torn tail: the
records that verify are kept at their offsets, the loss is named (ERROR, the log's damage record),
and no offset a group has committed past is given out again. A torn tail is still cut quietly."""

from __future__ import annotations

import logging
import os
import signal

import pytest

from commitlog import CommitLog, CorruptLogError, OffsetRemovedError, UnsafeLogFileError
from commitlog.damage import (LENGTH_REPAIRED, OFFSETS_SKIPPED, RECORD_LOST, RECORDS_UNPLACED,
                              read_damage)
from commitlog.layout import damaged_path, segment_path
from commitlog.record import encode

from storea_helpers import acked_writer, expect, flip, payload, record_positions, spawn

SEGMENT = 1 << 20
COUNT = 200
VALUE = 100


def _write_and_kill(path: str) -> str:
    child = spawn(f"acked_writer({path!r}, {SEGMENT}, {COUNT}, {VALUE})")
    try:
        assert expect(child) == {"acked": COUNT}
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    return segment_path(path, 0)


def _reads(log, offsets) -> dict[int, bytes | str]:
    out = {}
    for offset in offsets:
        try:
            out[offset] = log.read(offset).value
        except OffsetRemovedError:
            out[offset] = "removed"
    return out


@pytest.mark.parametrize("where", ["body", "crc", "timestamp"])
def test_a_flipped_byte_in_one_record_keeps_every_record_after_it(tmp_path, caplog, where):
    path = str(tmp_path / "log")
    seg = _write_and_kill(path)
    pos = record_positions(seg)[190]
    flip(seg, pos + {"body": 60, "crc": 5, "timestamp": 12}[where])
    with caplog.at_level(logging.WARNING, logger="commitlog"):
        log = CommitLog.open(path)
    with log:
        got = _reads(log, range(COUNT))
        assert got[190] == "removed"
        assert all(got[i] == payload(i, VALUE) for i in range(COUNT) if i != 190)
        assert [r.offset for r in log.scan()] == [i for i in range(COUNT) if i != 190]
        assert log.append(b"next") == COUNT
        assert log.read(COUNT).value == b"next"
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors and "offset 190" in errors[0].getMessage() and seg in errors[0].getMessage()
    [entry] = read_damage(path)
    assert (entry["kind"], entry["segment"], entry["position"], entry["offsets"]) == \
        (RECORD_LOST, os.path.basename(seg), pos, [190, 191])


def test_a_flipped_byte_in_a_length_is_written_back_and_nothing_is_lost(tmp_path, caplog):
    path = str(tmp_path / "log")
    seg = _write_and_kill(path)
    pos = record_positions(seg)[190]
    flip(seg, pos, 0x10)          # the low byte of the length: the boundary is lost
    with caplog.at_level(logging.WARNING, logger="commitlog"):
        log = CommitLog.open(path)
    with log:
        assert [r.value for r in log.scan()] == [payload(i, VALUE) for i in range(COUNT)]
        assert log.append(b"next") == COUNT
    [entry] = read_damage(path)
    assert (entry["kind"], entry["position"]) == (LENGTH_REPAIRED, pos)
    assert any(r.levelno >= logging.ERROR for r in caplog.records)


def test_damage_that_hides_where_records_end_saves_them_aside_and_skips_committed_offsets(tmp_path,
                                                                                          caplog):
    path = str(tmp_path / "log")
    seg = _write_and_kill(path)
    pos = record_positions(seg)[190]
    for at in range(pos, pos + 8):   # length and CRC both: no length one byte away verifies
        flip(seg, at, 0x5A)
    with caplog.at_level(logging.WARNING, logger="commitlog"):
        log = CommitLog.open(path)
    with log:
        assert [r.offset for r in log.scan()] == list(range(190))
        # etl committed 200: offsets 190..199 are never given out again.
        assert log.append(b"next") == COUNT
        assert log.committed() == {"etl": COUNT}
    kinds = {e["kind"]: e for e in read_damage(path)}
    assert set(kinds) == {RECORDS_UNPLACED, OFFSETS_SKIPPED}
    assert kinds[OFFSETS_SKIPPED]["offsets"] == [190, 200]
    saved = os.path.join(path, kinds[RECORDS_UNPLACED]["saved"])
    with open(saved, "rb") as f:
        data = f.read()
    assert len(data) == (COUNT - 190) * (21 + VALUE)
    assert all(payload(i, VALUE) in data for i in range(191, COUNT))
    assert any(r.levelno >= logging.ERROR for r in caplog.records)


def test_a_link_planted_where_unplaced_bytes_are_saved_is_refused_and_nothing_is_cut(tmp_path):
    path = str(tmp_path / "log")
    seg = _write_and_kill(path)
    pos = record_positions(seg)[190]
    for at in range(pos, pos + 8):
        flip(seg, at, 0x5A)
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me")
    link = damaged_path(seg, pos)
    os.symlink(victim, link)
    with open(seg, "rb") as f:
        before = f.read()
    with pytest.raises(UnsafeLogFileError) as err:
        CommitLog.open(path)
    assert err.value.path == link and victim.read_bytes() == b"keep me"
    with open(seg, "rb") as f:
        assert f.read() == before
    os.unlink(link)
    with CommitLog.open(path) as log:
        assert [r.offset for r in log.scan()] == list(range(190))
    with open(link, "rb") as f:
        assert len(f.read()) == (COUNT - 190) * (21 + VALUE)


def test_a_torn_tail_is_cut_quietly_with_no_damage_record(tmp_path, caplog):
    path = str(tmp_path / "log")
    seg = _write_and_kill(path)
    end = record_positions(seg)[-1] + 21 + VALUE
    with open(seg, "r+b") as f:      # a record in flight: its frame and half its body
        f.seek(end)
        f.write(encode(b"x" * 400, None, 0)[:200])
    with caplog.at_level(logging.WARNING, logger="commitlog"):
        log = CommitLog.open(path)
    with log:
        assert [r.offset for r in log.scan()] == list(range(COUNT))
        assert log.append(b"next") == COUNT
    assert read_damage(path) == []
    assert not any(r.levelno >= logging.ERROR for r in caplog.records)
    assert any("torn" in r.getMessage() for r in caplog.records)


def _fill_exactly(path: str) -> tuple[str, int]:
    """A log whose only segment is full to its last byte, its last record 21 bytes (no value),
    group etl committed at its end; closed unsealed, as a crash leaves it. (path, end)."""
    with CommitLog.open(path, SEGMENT, flush="sync") as log:
        n = SEGMENT // (21 + VALUE) - 1
        log.append_batch([payload(i, VALUE) for i in range(n)])
        left = SEGMENT - n * (21 + VALUE)
        log.append(b"p" * (left - 21 - 21))
        log.append(b"")
        assert log.segments()[-1].used_bytes == SEGMENT and len(log.segments()) == 1
        log.commit("etl", n + 2)
        return log.segments()[-1].path, n + 2


@pytest.mark.parametrize("room", ["in-segment", "segment-full"])
def test_a_tail_lost_after_groups_committed_it_is_skipped_never_given_out_again(tmp_path, room):
    """The page cache lost the last records (a power loss): the groups' commits stay past the end
    found; the offsets between are skipped, and readers in other processes pass the gap."""
    path = str(tmp_path / "log")
    if room == "in-segment":
        seg, end, lost = _write_and_kill(path), COUNT, 20
    else:                           # 21 bytes freed: no room for the gap record, a new segment
        seg, end = _fill_exactly(path)
        lost = 1
    first = end - lost
    at = record_positions(seg)[first]
    with open(seg, "r+b") as f:
        f.seek(at)
        f.write(bytes(os.path.getsize(seg) - at))
    log = CommitLog.open(path)
    try:
        assert log.append(b"after") == end
        assert len(log.segments()) == (1 if room == "in-segment" else 2)
        reader = spawn(f"gap_reader({path!r}, {first - 2}, {end + 1})")
        got = expect(reader)
        assert reader.wait(60) == 0
    finally:
        log.close()
    assert got["scanned"] == list(range(first)) + [end]
    assert got["reads"] == {**{str(o): o for o in (first - 2, first - 1, end)},
                            **{str(o): f"removed, next {end}" for o in range(first, end)}}
    [entry] = read_damage(path)
    assert (entry["kind"], entry["offsets"]) == (OFFSETS_SKIPPED, [first, end])
