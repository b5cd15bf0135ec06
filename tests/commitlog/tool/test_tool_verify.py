"""`commitlog verify`: every record's CRC and each index against the data; a flipped byte in a
sealed segment or an index is named by file and byte (exit 1), and verify changes nothing."""

from __future__ import annotations

import json
import os

import pytest

from commitlog import CommitLog
from commitlog import record as rec

from tool_helpers import digest, make_log, one_line, run_tool


def _flip(path: str, byte: int) -> None:
    with open(path, "r+b") as f:
        f.seek(byte)
        old = f.read(1)[0]
        f.seek(byte)
        f.write(bytes([old ^ 0x10]))


def _record_span(path: str, byte: int) -> tuple[int, int]:
    """(start, end) of the record holding `byte` of segment `path`."""
    data = open(path, "rb").read()
    pos = 0
    while True:
        r = rec.decode_at(data, pos, len(data))
        assert r.status == rec.OK
        if byte < r.next_position:
            return pos, r.next_position
        pos = r.next_position


def test_a_sound_log_with_compacted_and_short_segments_verifies(tmp_path):
    path = tmp_path / "app"
    make_log(path)
    with CommitLog.open(path, roll_after=3600) as log:
        log.mark_dead(range(10, 120))
        sealed = [s.base_offset for s in log.segments()[:-1]]
        log.compact([sealed[:1]], lambda o, k, t, m: "dead" if m else None, marks=log.marks_snapshot())
    before = digest(path)
    out = run_tool("verify", path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "every record's CRC and every index agree" in out.stdout and out.stderr == ""
    assert digest(path) == before
    data = json.loads(run_tool("verify", path, "--json").stdout)
    assert data["ok"] and data["problems"] == [] and data["records"] == 600 - 110


@pytest.mark.parametrize("where", [0.1, 0.5, 0.97])
def test_a_flipped_byte_in_a_sealed_segment_is_named_by_file_and_byte(tmp_path, where):
    path = tmp_path / "app"
    make_log(path)
    with CommitLog.open(path, readonly=True) as log:
        second = log.segments()[1]
    byte = int(second.used_bytes * where)
    start, end = _record_span(second.path, byte)
    _flip(second.path, byte)
    before = digest(path)
    out = run_tool("verify", path)
    assert out.returncode == 1
    line = one_line(out.stderr)
    assert line.startswith(f"commitlog: verify: {second.path}: byte ")
    named = int(line.split(": byte ")[1].split(":")[0])
    assert start <= named <= byte < end, (line, start, byte, end)
    assert digest(path) == before
    data = json.loads(run_tool("verify", path, "--json").stdout)
    assert data["problems"][0]["file"] == os.path.basename(second.path) and data["problems"][0]["byte"] == named


@pytest.mark.parametrize("byte, what", [(9, "used bytes"), (17, "record count"), (28, "first timestamp"),
                                        (52, "CRC32"), (64, "entry 0"), (69, "entry 0"), (77, "entry 1")])
def test_a_flipped_byte_in_a_sealed_index_is_named_by_file_and_byte(tmp_path, byte, what):
    path = tmp_path / "app"
    make_log(path, records=3000, segment_size=64 << 10)     # entries every 4 KiB of records
    index = str(path / "00000000000000000000.index")
    _flip(index, byte)
    out = run_tool("verify", path)
    assert out.returncode == 1
    line = one_line(out.stderr)
    assert line.startswith(f"commitlog: verify: {index}: byte ") and what in line, line
    named = int(line.split(": byte ")[1].split(":")[0])
    assert named == byte or (what.startswith("entry") and byte - 4 <= named <= byte), line


def test_a_torn_write_at_the_active_end_is_a_note_and_damage_before_good_records_is_not(tmp_path):
    path = tmp_path / "app"
    make_log(path)
    with CommitLog.open(path, readonly=True) as log:
        active = log.segments()[-1]
    with open(active.path, "r+b") as f:    # a frame and half a body, then nothing: a crash's torn write
        f.seek(active.used_bytes)
        f.write(rec.FRAME.pack(40, 12345) + b"half a bo")
    out = run_tool("verify", path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"byte {active.used_bytes}: a torn write" in out.stdout
    _flip(active.path, 30)                 # now records that verify follow bad bytes: damage
    out = run_tool("verify", path)
    assert out.returncode == 1 and f"{active.path}: byte " in one_line(out.stderr)


def _segments(path) -> list:
    with CommitLog.open(path, readonly=True) as log:
        return log.segments()


def test_a_segment_deleted_outside_the_store_is_a_gap_named_by_the_next_segment(tmp_path):
    path = tmp_path / "app"
    make_log(path)
    segs = _segments(path)
    first, gone, after = segs[0], segs[1], segs[2]
    os.unlink(gone.path)
    before = digest(path)
    out = run_tool("verify", path)
    assert out.returncode == 1, out.stdout + out.stderr
    line = one_line(out.stderr)
    assert line.startswith(f"commitlog: verify: {after.path}: offsets [{gone.base_offset}, "
                           f"{after.base_offset}) are missing") and os.path.basename(first.path) in line, line
    assert digest(path) == before
    os.unlink(first.path)                  # the head as well: missing from the start offset
    out = run_tool("verify", path, "--json")
    data = json.loads(out.stdout)
    assert out.returncode == 1 and not data["ok"]
    assert any(p["file"] == os.path.basename(after.path) and f"offsets [0, {after.base_offset})" in p["detail"]
               for p in data["problems"]), data["problems"]


def test_a_segment_renamed_into_the_offsets_of_the_one_before_is_an_overlap(tmp_path):
    path = tmp_path / "app"
    make_log(path)
    segs = _segments(path)
    full, moved = segs[1], segs[2]
    inside = full.base_offset + 5
    renamed = os.path.join(path, f"{inside:020d}.log")
    os.rename(moved.path, renamed)          # its index records its base: taken away with it
    os.unlink(moved.path[:-len(".log")] + ".index")
    before = digest(path)
    out = run_tool("verify", path, "--json")
    data = json.loads(out.stdout)
    assert out.returncode == 1 and not data["ok"], out.stdout + out.stderr
    assert any(p["file"] == os.path.basename(renamed) and f"its name says offset {inside}" in p["detail"]
               and os.path.basename(full.path) in p["detail"] for p in data["problems"]), data["problems"]
    assert digest(path) == before


def test_a_gap_a_compaction_recorded_verifies(tmp_path):
    path = tmp_path / "app"
    make_log(path)
    segs = _segments(path)
    whole = segs[1]
    with CommitLog.open(path, roll_after=3600) as log:
        log.mark_dead(range(whole.base_offset, segs[2].base_offset))
        log.compact([[whole.base_offset]], lambda o, k, t, m: "dead" if m else None, marks=log.marks_snapshot())
    assert not os.path.exists(whole.path)  # removed whole: a gap between the files, recorded
    out = run_tool("verify", path)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("name", ["segment", "index"])
def test_a_fifo_at_a_segments_or_an_index_name_is_named_never_opened(tmp_path, name):
    path = tmp_path / "app"
    make_log(path)
    seg = _segments(path)[1]
    target = seg.path if name == "segment" else seg.path[:-len(".log")] + ".index"
    os.unlink(target)
    os.mkfifo(target)
    out = run_tool("verify", path, timeout=60)
    assert out.returncode == 1, out.stdout + out.stderr
    assert one_line(out.stderr) == (f"commitlog: verify: {target}: a FIFO at {'a segment' if name == 'segment' else 'an index'}"
                                    f"'s name, not a regular file (never read)")
