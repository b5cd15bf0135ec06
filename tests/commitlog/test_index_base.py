"""A sealed index records its segment's base offset (commitlog/segments/index.py, FLAG_BASE): read
back under its own name, refused under another, absent from an older index, left out when every
entry slot is used. Real files."""

from __future__ import annotations

import dataclasses
import os

import pytest

from commitlog import CommitLog, CorruptLogError
from commitlog.layout import index_path, segment_path
from commitlog.segments.index import (ENTRY, HEADER_SIZE, IndexWriter, SegmentSummary, index_file_size,
                                      parse_sealed, read_sealed, write_sealed)

SUMMARY = SegmentSummary(300, 7, 1000, 1006, 5, (2, 5), (100, 200), base=40)


def test_a_sealed_index_reads_back_its_base_under_its_own_name(tmp_path):
    path = index_path(segment_path(str(tmp_path), 40))
    write_sealed(path, SUMMARY)
    assert read_sealed(path) == SUMMARY


def test_an_index_under_another_segments_name_is_corrupt_naming_the_segment(tmp_path):
    path = index_path(segment_path(str(tmp_path), 41))
    write_sealed(path, SUMMARY)
    with pytest.raises(CorruptLogError, match="its name says offset 41, but its index records base offset 40") as err:
        read_sealed(path)
    assert err.value.path == segment_path(str(tmp_path), 41)


def test_an_index_without_a_base_is_read_as_before(tmp_path):
    path = index_path(segment_path(str(tmp_path), 41))
    old = dataclasses.replace(SUMMARY, base=None)
    write_sealed(path, old)
    assert read_sealed(path) == old
    assert os.path.getsize(path) == HEADER_SIZE + 2 * ENTRY.size   # an older store's layout


def test_the_base_is_covered_by_the_checksum(tmp_path):
    path = index_path(segment_path(str(tmp_path), 40))
    write_sealed(path, SUMMARY)
    data = bytearray(open(path, "rb").read())
    data[-8] ^= 1                                                 # base 40 -> 41
    assert parse_sealed(bytes(data)) is None                      # damaged: rebuilt, not believed


def test_an_index_with_every_entry_slot_used_is_sealed_without_its_base(tmp_path):
    path = str(tmp_path / "x.index")
    size = 8192
    slots = (index_file_size(size) - HEADER_SIZE) // ENTRY.size
    writer = IndexWriter(path, size, [], [])
    for i in range(slots):
        writer.add(i + 1, 10 * (i + 1))
    full = dataclasses.replace(SUMMARY, rels=tuple(writer.rels), positions=tuple(writer.positions))
    writer.seal(full)
    writer.close()
    assert parse_sealed(open(path, "rb").read()) == dataclasses.replace(full, base=None)


def test_the_store_seals_and_compacts_indexes_recording_their_base(tmp_path):
    path = str(tmp_path / "log")
    with CommitLog.open(path, segment_size=4096) as log:
        for o in range(60):
            log.append(b"v" * 200, key=b"k")
        bases = [s.base_offset for s in log.segments()]
        log.compact([bases[:2]], lambda o, k, t, m: "superseded" if o < 30 else None)
        sealed = [s.base_offset for s in log.segments()[:-1]]
    summaries = [read_sealed(index_path(segment_path(path, base))) for base in sealed]
    assert [s.base for s in summaries] == sealed and summaries[0].compacted
