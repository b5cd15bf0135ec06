"""Probe: a reader holding the last segment while its writer seals it short (`roll_after`).

The seal cuts the file to its records and end marker; a reader that mapped it at full size and
decodes the 21-byte header at the end marker would touch the page after the new end of file and
die of SIGBUS. Record sizes 4071 and 4060 put the cut 0 and 4 bytes before a page boundary."""

from __future__ import annotations

import os

import pytest

from storea_helpers import expect, spawn, tell

SEGMENT = 1 << 20


@pytest.mark.parametrize("record_size, count", [(4071, 164), (4060, 114), (4071, 200)])
def test_a_reader_holding_a_segment_sealed_short_reads_on_and_lives(tmp_path, record_size, count):
    path = str(tmp_path / "log")
    assert count * record_size < SEGMENT
    writer = spawn(f"short_sealer({path!r}, {SEGMENT}, {record_size}, {count})")
    reader = None
    try:
        assert expect(writer) == {"appended": count}
        reader = spawn(f"held_scanner({path!r}, {count // 2})")
        assert expect(reader) == {"held": count // 2 - 1}
        tell(writer)
        sealed = expect(writer)
        assert sealed["sealed"]
        tell(reader)
        assert expect(reader) == {"read": count, "last": count - 1, "contiguous": True}
        assert reader.wait(60) == 0, reader.stderr.read()
        tell(writer, "close")
        # Once nobody holds it, the unused tail is given back: records and end marker only.
        assert expect(writer) == {"size": count * record_size + 4}
        assert writer.wait(60) == 0, writer.stderr.read()
    finally:
        for proc in (writer, reader):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


def test_a_retention_pass_rolling_an_idle_log_leaves_a_held_segment_whole_until_it_is_let_go(tmp_path):
    path = str(tmp_path / "log")
    record_size, count = 4071, 164
    writer = spawn(f"short_sealer({path!r}, {SEGMENT}, {record_size}, {count})")
    roller = reader = None
    try:
        assert expect(writer) == {"appended": count}   # and closed: the log is idle
        reader = spawn(f"held_scanner({path!r}, {count // 2})")
        assert expect(reader) == {"held": count // 2 - 1}
        roller = spawn(f"idle_roller({path!r})")
        tell(roller)
        assert expect(roller) == {"rolled": "rolled", "size": SEGMENT}   # sealed, not cut
        tell(reader)
        assert expect(reader) == {"read": count, "last": count - 1, "contiguous": True}
        assert reader.wait(60) == 0, reader.stderr.read()
        tell(roller)                                  # the next pass's open cuts it
        assert expect(roller) == {"rolled": "not-due", "size": count * record_size + 4}
    finally:
        for proc in (writer, reader, roller):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
