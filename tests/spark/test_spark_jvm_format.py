"""The JVM reader parses segment files as the Python store does: its record walk
(jvm/src/.../SegmentCursor.java, dumped by DumpRecords) against `CommitLog.scan` on the same
files, for a format-1 log (the committed fixture: gap records, dead and control records, marks),
that log compacted to format 2 (offset deltas beside format-1 gaps), a torn tail, a corrupt
record, and a removed head (the start offset file read); and a committed record corrupted on disk
fails a Spark read on both readers, naming the log."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import zlib
from pathlib import Path

import pyspark
import pytest

from commitlog import CommitLog, CorruptLogError
from commitlog.layout import segment_path
from commitlog.spark import jvm
from commitlog.spark.schema import writer_of_key

from spark_helpers import load, stage

FIXTURE = Path(__file__).parents[1] / "commitlog" / "fixtures" / "format1" / "log"


def java_walk(path: str, start: int = 0, end: int = 1 << 62) -> tuple[list[tuple], str, int]:
    """(records, why it stopped, offset it stopped at) as the JVM reader walks [start, end)."""
    assert jvm.available(), f"{jvm.JAR} is not built: `make jar` builds it"
    classpath = f"{jvm.JAR}:{os.path.join(os.path.dirname(pyspark.__file__), 'jars', '*')}"
    out = subprocess.run(["java", "-cp", classpath, "commitlog.spark.jvm.DumpRecords", path,
                          str(start), str(end)], check=True, capture_output=True, text=True).stdout
    lines = out.splitlines()
    assert lines[0].startswith("start ") and lines[-1].startswith("stop ")
    _, why, at = lines[-1].split()
    return [tuple(int(x) for x in line.split()) for line in lines[1:-1]], why, int(at), \
        int(lines[0].split()[1])


def python_scan(path: str, start: int | None = None, end: int | None = None):
    """(records as DumpRecords prints them, marked offsets, start offset, end offset)."""
    with CommitLog.open(path, readonly=True) as log:
        records = [(r.offset, r.attributes, r.timestamp_ms, -1 if r.key is None else len(r.key),
                    len(r.value), zlib.crc32(r.value))
                   for r in log.scan(log.start_offset if start is None else start, end)]
        marked = {o for o, _, _, m in log.record_facts(log.marks_snapshot()) if m}
        return records, marked, log.start_offset, log.end_offset


def assert_same_walk(path: str, start: int = 0, stops=("EMPTY", "END")) -> list[tuple]:
    want, marked, first, end = python_scan(path, max(start, 0) or None)
    got, why, at, java_start = java_walk(path, start)
    # Marks live beside the data (commitlog.marks): the JVM reader is only ever asked for
    # records the ledger made visible, which are never marked.
    assert [r for r in got if r[0] not in marked] == want
    assert java_start == first
    assert why in stops and at == end, (why, at, end)
    return got


def record_position(data: bytes, records: int) -> int:
    """Where record number `records` (from 0) of a segment's bytes starts."""
    pos = 0
    for _ in range(records):
        pos += 8 + int.from_bytes(data[pos:pos + 4], "little")
    return pos


def _written_log(path: str, records: int, segment_size: int) -> list:
    """A log at `path` of `records` small records (offset-numbered values); its segments."""
    with CommitLog.open(path, segment_size=segment_size) as log:
        for i in range(records):
            log.append(b"%05d" % i * 10)
        return log.segments()


def _fixture(tmp_path) -> str:
    path = str(tmp_path / "log")
    shutil.copytree(FIXTURE, path)
    return path


def test_a_format_1_log_walks_as_the_store_scans_it(tmp_path):
    path = _fixture(tmp_path)
    got = assert_same_walk(path)
    assert len(got) > 200
    middle = got[len(got) // 2][0]                       # a walk that starts mid-segment
    assert java_walk(path, middle)[0] == [r for r in got if r[0] >= middle]


def test_a_log_compacted_to_format_2_walks_as_the_store_scans_it(tmp_path):
    path = _fixture(tmp_path)
    with CommitLog.open(path) as log:
        for i in range(200):
            log.append(b"new-%d" % i, key=b"n%d" % (i % 7), timestamp_ms=1_800_000_000_000 + i)
        bases = [s.base_offset for s in log.segments()[:-1]]
        log.compact([[b] for b in bases[::2]],
                    lambda o, k, t, marked: "test" if marked or o % 5 == 4 else None)
    got = assert_same_walk(path)
    offsets = [r[0] for r in got]
    assert any(b - a > 1 for a, b in zip(offsets, offsets[1:]))  # deltas and gaps were followed


def test_a_torn_tail_ends_the_walk_where_the_store_ends_the_log(tmp_path):
    path = str(tmp_path / "log")
    tail = _written_log(path, 50, 1 << 16)[-1]
    with open(tail.path, "r+b") as f:                       # half of a record being written
        f.seek(tail.used_bytes)
        f.write((200).to_bytes(4, "little") + b"\x01\x02\x03\x04" + b"x" * 60)
    assert_same_walk(path, stops=("BAD",))          # where the store's recovery ends the log


def test_a_corrupt_record_stops_the_walk_as_bad(tmp_path):
    path = str(tmp_path / "log")
    _written_log(path, 50, 1 << 16)
    with open(segment_path(path, 0), "r+b") as f:         # a flipped byte in record 10's value
        data = f.read()
        pos = record_position(data, 10)
        f.seek(pos + 30)
        f.write(bytes([data[pos + 30] ^ 0xFF]))
    got, why, at, _ = java_walk(path)
    assert [r[0] for r in got] == list(range(10)) and (why, at) == ("BAD", 10)


def test_zeroed_records_in_a_sealed_segment_stop_the_walk_as_bad(tmp_path):
    # Zeros where records should be, records after them: damage, which the store reports too,
    # not the end of a segment rolled without its end marker (zeros up to its end).
    path = str(tmp_path / "log")
    segments = _written_log(path, 300, 4096)
    assert len(segments) > 2
    sealed_end = segments[0].used_bytes
    segment = segment_path(path, 0)
    with open(segment, "r+b") as f:                       # its end marker lost: zeros to its end
        f.seek(sealed_end)
        assert f.read(4) == b"\xff" * 4
        f.seek(sealed_end)
        f.write(bytes(4))
    assert len(assert_same_walk(path)) == 300
    with open(segment, "r+b") as f:
        data = f.read()
        pos = record_position(data, 10)
        f.seek(pos)
        f.write(bytes(record_position(data, 12) - pos))   # records 10 and 11 zeroed
    with CommitLog.open(path, readonly=True) as log, pytest.raises(CorruptLogError,
                                                                   match=re.escape(segment)):
        list(log.scan())
    got, why, at, _ = java_walk(path)
    assert [r[0] for r in got] == list(range(10)) and (why, at) == ("BAD", 10)


def test_a_removed_head_is_reported_and_the_start_offset_read(tmp_path):
    path = str(tmp_path / "log")
    second = _written_log(path, 300, 4096)[1].base_offset
    with CommitLog.open(path) as log:
        log.remove_head()                                 # retention removed the first segment
    assert not os.path.exists(segment_path(path, 0))
    got, why, at, start = java_walk(path, 0)
    assert (got, why, at) == ([], "REMOVED", 0)
    assert start == second
    assert_same_walk(path, second)


def test_a_committed_record_corrupted_on_disk_fails_the_read_naming_the_log(spark, log_path,
                                                                            both_readers):
    stage(spark.range(0, 4000, numPartitions=4), log_path)
    with CommitLog.open(log_path, readonly=True) as log:
        victim = next(r.offset for r in log.scan() if writer_of_key(r.key))
        base = log.segments()[0].base_offset
    segment = segment_path(log_path, base)
    with open(segment, "r+b") as f:                       # one flipped byte in the victim's value
        data = f.read()
        pos = record_position(data, victim - base)
        end = pos + 8 + int.from_bytes(data[pos:pos + 4], "little")
        f.seek(end - 16)
        f.write(bytes([data[end - 16] ^ 0xFF]))
    with pytest.raises(Exception, match=re.escape(log_path)) as failure:
        load(spark, log_path).collect()
    assert "corrupt" in str(failure.value).lower() or "ends at offset" in str(failure.value)
