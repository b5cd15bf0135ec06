"""The record format's versions: a log written in format 1 (a fixture made by the store of commit
6d4bf25 and committed, see fixtures/make_format1_log.py) reads whole, rebuilt indexes included; a
compaction moves it to format 2, where a removed run costs the 8-byte offset delta of the record
after it instead of a gap record; a format this store does not know is refused."""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import threading
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commitlog import CommitLog, CorruptLogError, OffsetRemovedError
from commitlog import record as rec
from commitlog.meta import FORMAT_VERSION, log_format

# The projections expected.json was made with (the generator, run at 6d4bf25), compared alike.
from fixtures.make_format1_log import removed_offsets, scanned_records

FIXTURE = Path(__file__).parent / "fixtures" / "format1"
EXPECTED = json.loads((FIXTURE / "expected.json").read_text())


def _copy_fixture(tmp_path) -> str:
    path = str(tmp_path / "log")
    shutil.copytree(FIXTURE / "log", path)
    return path


def _reads_as_expected(log, end_offset: int = EXPECTED["end_offset"]) -> None:
    assert scanned_records(log)[:len(EXPECTED["records"])] == EXPECTED["records"]
    assert [o for o in removed_offsets(log) if o < EXPECTED["end_offset"]] == EXPECTED["removed"]
    assert (log.start_offset, log.end_offset) == (EXPECTED["start_offset"], end_offset)
    assert log.committed() == EXPECTED["committed"]
    for r in EXPECTED["records"]:                      # by offset too, through the indexes
        got = log.read(r["offset"])
        assert bytes(got.value).hex() == r["value"] and got.timestamp_ms == r["timestamp_ms"]


def _walk(path: str) -> list[tuple[int, int]]:
    """(attributes, delta) of every record of a segment file, gaps included, up to its end."""
    data = Path(path).read_bytes()
    out, pos = [], 0
    while True:
        r = rec.decode_at(data, pos, len(data))
        if r.status != rec.OK:
            assert r.status in (rec.END, rec.EMPTY)
            return out
        out.append((r.attributes, r.delta))
        pos = r.next_position


def test_a_log_written_in_format_1_reads_whole(tmp_path):
    path = _copy_fixture(tmp_path)
    assert log_format(path) == 1
    with CommitLog.open(path, readonly=True) as log:
        assert [s.base_offset for s in log.segments()] == EXPECTED["segments"]
        _reads_as_expected(log)
    with CommitLog.open(path) as log:                  # and by a writer, which recovers its tail
        _reads_as_expected(log)
    assert log_format(path) == 1                       # opening changes no format


def test_a_format_1_logs_indexes_rebuilt_from_its_data_read_the_same(tmp_path):
    path = _copy_fixture(tmp_path)
    for index in Path(path).glob("*.index"):
        index.unlink()
    with CommitLog.open(path, readonly=True) as log:
        _reads_as_expected(log)
        assert log.offset_for_time(EXPECTED["records"][0]["timestamp_ms"]) == \
            EXPECTED["records"][0]["offset"]


def test_a_compaction_moves_a_format_1_log_to_format_2_and_every_record_keeps_its_offset(tmp_path):
    path = _copy_fixture(tmp_path)
    with CommitLog.open(path) as log:
        end = log.end_offset
        for i in range(200):                           # new segments beside the old ones
            log.append(b"new-%d" % i, key=b"n%d" % (i % 7), timestamp_ms=1_800_000_000_000 + i)
        untouched = EXPECTED["segments"][1]            # keeps its format-1 gap records
        spans = {s.base_offset: s.end_offset for s in log.segments()[:-1] if s.base_offset != untouched}
        # Every other sealed segment, old and new, rewritten alone, dropping what is marked or
        # dead and every fifth offset besides.
        outputs = log.compact([[b] for b in spans],
                              lambda o, k, t, marked: "test" if marked or o % 5 == 4 else None)
        assert all(o.segment is not None for o in outputs)
        assert log_format(path) == FORMAT_VERSION == 2
        removed = set(EXPECTED["removed"]) | {o for b, e in spans.items() for o in range(b, e)
                                              if o % 5 == 4 and o < end}
        want = [r for r in EXPECTED["records"] if r["offset"] not in removed]
        assert scanned_records(log)[:len(want)] == want
        assert [o for o in removed_offsets(log) if o < end] == sorted(removed)
        for base in spans:
            walked = _walk(log._segs.segment_path(base))
            # A format-2 output holds no gap record but one where a removed run ends it.
            assert not any(a & rec.ATTR_GAP for a, _ in walked[:-1])
            assert any(a & rec.ATTR_DELTA and d for a, d in walked)
        assert any(a & rec.ATTR_GAP for a, _ in _walk(log._segs.segment_path(untouched)))
    for index in Path(path).glob("*.index"):           # the mixed log, its indexes rebuilt
        index.unlink()
    with CommitLog.open(path, readonly=True) as log:
        assert scanned_records(log)[:len(want)] == want
        assert [o for o in removed_offsets(log) if o < end] == sorted(removed)


def test_a_log_of_a_format_this_store_does_not_read_is_refused_and_left_as_it_is(tmp_path):
    path = _copy_fixture(tmp_path)
    meta = Path(path) / "meta.json"
    meta.write_text(json.dumps({"format": 3, "segment_size": 4096}))
    before = {p.name: p.read_bytes() for p in Path(path).iterdir()}
    for readonly in (True, False):
        with pytest.raises(CorruptLogError) as err:
            CommitLog.open(path, readonly=readonly)
        assert "meta.json" in str(err.value) and "format 3" in str(err.value)
        assert "\n" not in str(err.value)
    # The writer's lock file is the only file an open adds: no byte of the log changed.
    assert {p.name: p.read_bytes() for p in Path(path).iterdir() if p.name != ".lock"} == before


def test_a_new_log_is_format_2(tmp_path):
    with CommitLog.open(tmp_path / "log", segment_size=4096) as log:
        log.append(b"x")
    assert log_format(str(tmp_path / "log")) == 2


def test_each_removed_run_costs_the_delta_of_the_record_after_it(tmp_path):
    """Every other record dropped: each kept record after a dropped one grows by the 8-byte delta,
    the trailing run is one gap record; the index rebuilt from the data agrees with the written
    one, and reads by offset and by time find every kept record."""
    path = str(tmp_path / "log")
    with CommitLog.open(path, segment_size=4096, flush="none") as log:
        for i in range(120):
            log.append(b"%030d" % i, key=b"k%03d" % i, timestamp_ms=1000 + i)
        first = log.segments()[0]
        outputs = log.compact([[first.base_offset]], lambda o, k, t, m: "test" if o % 2 else None)
        kept = [o for o in range(first.base_offset, first.end_offset) if o % 2 == 0]
        size = rec.encoded_size(30, 4)
        trailing = first.end_offset - 1 > kept[-1]
        assert outputs[0].bytes_after == (len(kept) * size + (len(kept) - 1) * rec.DELTA_SIZE
                                          + (29 if trailing else 0) + rec.LENGTH_SIZE)
        summary = log.segments()[0]
    os.unlink(Path(path) / (os.path.basename(summary.path)[:-4] + ".index"))
    with CommitLog.open(path, readonly=True) as log:
        assert (log.segments()[0].end_offset, log.segments()[0].used_bytes) == \
            (summary.end_offset, summary.used_bytes)
        for o in range(first.base_offset, first.end_offset):
            if o % 2:
                with pytest.raises(OffsetRemovedError):
                    log.read(o)
            else:
                assert bytes(log.read(o).value) == b"%030d" % o
                assert log.offset_for_time(1000 + o) == o
        assert [r.offset for r in log.scan(first.base_offset + 1, first.end_offset)] == kept[1:]


# ---------------------------------------------------------------- CRC arithmetic of a moved record
# A compaction derives the CRC of a record framed anew from the CRC it verified (record.reframed
# with crc and head_crc), so the arithmetic must agree with zlib for every length.

_EDGE_LENGTHS = sorted({0, 1, 2, 3, 4, 7, 8, 255, 256, 257, rec.COMBINE_MIN - 1, rec.COMBINE_MIN,
                        rec.COMBINE_MIN + 1, 65535, 65536, 65537, 2**17 - 1}
                       | {2**k + d for k in range(1, 17) for d in (-1, 0, 1)})


def test_crc32_combine_agrees_with_zlib_for_every_length_below_4097_and_at_the_edges():
    rng = random.Random(39)
    for len2 in list(range(4097)) + _EDGE_LENGTHS:
        a, b = rng.randbytes(rng.randrange(40)), rng.randbytes(len2)
        assert rec.crc32_combine(zlib.crc32(a), zlib.crc32(b), len2) == zlib.crc32(a + b), len2


@given(a=st.binary(max_size=64), b=st.one_of(st.binary(max_size=5000),
                                             st.integers(0, 200_000).map(lambda n: b"\x5a" * n)),
       state=st.integers(0, 2**32 - 1))
@settings(max_examples=300, deadline=None)
def test_crc32_combine_and_shift_agree_with_zlib(a, b, state):
    assert rec.crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)
    # The shift alone: what a running CRC `state` becomes after len(b) zero bytes, unconditioned.
    zeros = bytes(len(b))
    assert rec.crc32_shift(state ^ 0xFFFFFFFF, len(b)) ^ 0xFFFFFFFF == zlib.crc32(zeros, state)


@given(size=st.one_of(st.integers(0, 300), st.integers(rec.COMBINE_MIN - 30, rec.COMBINE_MIN + 30),
                      st.integers(rec.COMBINE_MIN, 100_000)),
       key=st.one_of(st.none(), st.binary(max_size=40)), ts=st.integers(-(2**63), 2**63 - 1),
       attrs=st.integers(0, 255).map(lambda a: a & ~rec.ATTR_RESERVED),
       delta=st.one_of(st.just(0), st.integers(1, 2**64 - 1)),
       new_delta=st.one_of(st.just(0), st.integers(1, 2**64 - 1)))
@settings(max_examples=200, deadline=None)
def test_a_record_reframed_from_its_verified_crc_is_the_record_encoded_anew(size, key, ts, attrs,
                                                                           delta, new_delta):
    value = random.Random(size).randbytes(size)
    framed = rec.encode(value, key, ts, attrs, delta)
    r = rec.decode_at(framed, 0, len(framed))
    head_end = r.value_start if r.key_start < 0 else r.key_start
    rest = memoryview(framed)[head_end:]
    crc = rec.FRAME.unpack_from(framed)[1]
    head_crc = zlib.crc32(framed[rec.FRAME_SIZE:head_end])
    got = rec.reframed(r.attributes, ts, -1 if key is None else len(key), rest, new_delta, crc, head_crc)
    assert got == rec.encode(value, key, ts, attrs, new_delta)


def test_a_compaction_moving_long_records_writes_crcs_that_verify_and_still_checks_each(tmp_path):
    """Records past COMBINE_MIN moved past a removed run get their CRC derived, not recomputed: the
    output reads whole (every CRC verified by the reader); a record damaged in its value is
    still refused before it is copied, by the derived path's check."""
    size = rec.COMBINE_MIN + 1000
    path = str(tmp_path / "log")
    with CommitLog.open(path, segment_size=8 * (size + 64)) as log:
        for o in range(40):
            log.append(bytes([o]) * size, key=b"k%d" % o if o % 2 else None, timestamp_ms=o)
        log.mark_dead([o for o in range(40) if o % 3])
        sealed = [s.base_offset for s in log.segments()[:-1]]
        last = sealed.pop()                       # damaged below, compacted after the others
        outs = log.compact([[b] for b in sealed], lambda o, k, t, m: "dead" if m else None)
        assert sum(o.kept for o in outs) == len([o for o in range(last) if o % 3 == 0])
        assert [(r.offset, r.value) for r in log.scan(0, last)] == \
            [(o, bytes([o]) * size) for o in range(last) if o % 3 == 0]
        assert any(d for s in log.segments()[:-2] for _, d in _walk(s.path))  # moved, with deltas
        seg = log.segments()[-2]
        victim = next(o for o in range(seg.base_offset, seg.end_offset) if o % 3 == 0 and o > seg.base_offset)
    with open(seg.path, "r+b") as f:                  # a byte of the kept record's value flipped
        data = f.read()
        at = data.index(bytes([victim]) * size) + size // 2
        f.seek(at)
        f.write(bytes([victim ^ 0xFF]))
    with CommitLog.open(path) as log:
        with pytest.raises(CorruptLogError, match="checksum does not verify"):
            log.compact([[last]], lambda o, k, t, m: "dead" if m else None)


def test_shift_tables_built_by_threads_at_once_give_zlibs_crcs(monkeypatch):
    """The shift tables are built on first use; threads that first need them at the same time
    (compactions of several logs) must still get the CRCs zlib gives."""
    monkeypatch.setattr(rec, "_SHIFT_TABLES", [])
    rng = random.Random(7)
    cases = [(rng.randbytes(20), rng.randbytes(n)) for n in (2**20 - 1, 2**19 + 3, 2**18 - 5, 70_001)]
    results: list[bool] = []
    start = threading.Barrier(8)

    def work(a: bytes, b: bytes) -> None:
        start.wait()
        results.append(rec.crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b))

    threads = [threading.Thread(target=work, args=cases[i % len(cases)]) for i in range(8)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)                # switch threads often: the race, if any, shows
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert results == [True] * 8
    assert len(rec._SHIFT_TABLES) == 20        # one table per bit, none twice
