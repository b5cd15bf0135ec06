"""Probes: a flipped byte in a sealed segment. Readers never skip the records it hides nor crash:
they raise CorruptLogError naming the segment, the byte and the offset they were reading."""

from __future__ import annotations

import os

import pytest

from commitlog import CommitLog, CorruptLogError
from commitlog.layout import index_path

from storea_helpers import flip, payload, record_positions

SEGMENT = 1 << 16
VALUE = 100
COUNT = 2000


def _sealed_log(path: str) -> tuple[str, int, int]:
    """A log of several sealed segments; (the second segment's path, its base, its end)."""
    with CommitLog.open(path, SEGMENT) as log:
        for i in range(COUNT):
            log.append(payload(i, VALUE))
        seg = log.segments()[1]
        return seg.path, seg.base_offset, seg.end_offset


@pytest.mark.parametrize("where, xor", [("body", 0x40), ("crc", 0x01), ("length", 0x10),
                                        ("length-high", 0x01), ("key-length", 0x80)])
def test_a_flipped_byte_in_a_sealed_segment_is_a_corrupt_log_naming_segment_byte_and_offset(
        tmp_path, where, xor):
    path = str(tmp_path / "log")
    seg, base, end = _sealed_log(path)
    k = 25                                     # the 26th record: not at an index checkpoint
    pos = record_positions(seg)[k]
    flip(seg, pos + {"body": 60, "crc": 5, "length": 0, "length-high": 2, "key-length": 20}[where], xor)
    victim = base + k
    with CommitLog.open(path, readonly=True) as log:
        with pytest.raises(CorruptLogError) as err:
            for r in log.scan():
                assert r.value == payload(r.offset, VALUE)
        _names(err.value, seg, pos, victim)
        with pytest.raises(CorruptLogError) as err:
            log.read(victim)
        _names(err.value, seg, pos, victim)
        for offset in (victim + 1, victim + 5):   # after it, before the next checkpoint
            with pytest.raises(CorruptLogError) as err:
                log.read(offset)
            _names(err.value, seg, pos, offset)
        assert log.read(victim - 1).value == payload(victim - 1, VALUE)
        assert log.read(end).value == payload(end, VALUE)       # the next segment is intact
        assert [r.offset for r in log.scan(end)] == list(range(end, COUNT))


def _names(err: CorruptLogError, seg: str, pos: int, offset: int) -> None:
    text = str(err)
    assert seg in text and f"byte {pos}" in text and f"offset {offset}" in text, text


def test_a_flipped_byte_in_a_sealed_segment_whose_index_is_gone_names_it_too(tmp_path):
    path = str(tmp_path / "log")
    seg, base, end = _sealed_log(path)
    pos = record_positions(seg)[25]
    flip(seg, pos + 60)
    os.unlink(index_path(seg))
    with CommitLog.open(path, readonly=True) as log:
        for call in (lambda: list(log.scan()), lambda: log.read(base + 30), log.segments,
                     lambda: log.offset_for_time(0)):
            with pytest.raises(CorruptLogError) as err:
                call()
            _names(err.value, seg, pos, base + 25)
