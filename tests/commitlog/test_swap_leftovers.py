"""An interrupted swap's leftovers (commitlog.cleanup.swap) seen by head removal and by a read-only open
before the writer's next open removes them: input segments still on disk after the commit point,
superseded by the compacted segment before them, and `.cleaned` files of a compaction cut short."""

from __future__ import annotations

import os
import shutil

import pytest

from commitlog import CommitLog, OffsetRemovedError
from commitlog.layout import CLEANED_SUFFIX, index_path, segment_path

SEG = 4096
VALUE = b"v" * 979  # 1000 bytes framed: four records a segment


def _build(path: str, records: int = 25) -> list[int]:
    with CommitLog.open(path, segment_size=SEG, flush="none") as log:
        for i in range(records):
            log.append(VALUE, key=b"%d" % i)
        return [s.base_offset for s in log.segments()]      # 0, 4, ..., 24 (active)


def _compact_leaving_leftovers(path: str, run: list[int], drop: set[int]) -> None:
    """Compact `run` dropping the offsets `drop`, then put every input but the first back, as a
    SIGKILL between the commit point (step 3) and the inputs' unlink (step 4) leaves them."""
    aside = path + ".aside"
    os.makedirs(aside)
    for base in run[1:]:
        for p in (segment_path(path, base), index_path(segment_path(path, base))):
            shutil.copy2(p, aside)
    with CommitLog.open(path, readonly=True) as log:
        [out] = log.compact([run], lambda o, k, t, m: "superseded" if o in drop else None,
                            marks=log.marks_snapshot())
        assert out.segment == run[0] and out.inputs == tuple(run)
    for name in os.listdir(aside):
        shutil.copy2(os.path.join(aside, name), path)
    shutil.rmtree(aside)


def _files(path: str) -> list[str]:
    return sorted(n for n in os.listdir(path) if n.endswith(".log"))


def test_a_read_only_open_passes_leftovers_and_never_reads_a_dropped_record_from_them(tmp_log_dir):
    _build(tmp_log_dir)
    _compact_leaving_leftovers(tmp_log_dir, [4, 8], drop={5, 6, 9, 10, 11})
    assert "00000000000000000008.log" in _files(tmp_log_dir)      # the leftover is there
    with CommitLog.open(tmp_log_dir, readonly=True) as log:
        assert [(s.base_offset, s.end_offset) for s in log.segments()][:3] == [(0, 4), (4, 12), (12, 16)]
        for dropped, nxt in ((5, 7), (9, 12), (11, 12)):
            with pytest.raises(OffsetRemovedError) as ei:
                log.read(dropped)
            assert ei.value.next_offset == nxt
        assert log.read(8).offset == 8 and log.read(12).offset == 12
        assert [r.offset for r in log.scan(0, 14)] == [0, 1, 2, 3, 4, 7, 8, 12, 13]


def test_head_removal_takes_the_leftovers_with_the_compacted_head(tmp_log_dir):
    _build(tmp_log_dir)
    _compact_leaving_leftovers(tmp_log_dir, [4, 8], drop={5, 6, 9, 10, 11})
    with CommitLog.open(tmp_log_dir, readonly=True) as log:
        assert log.remove_head().base_offset == 0
        result = log.remove_head()
        # The start moves past the compacted head's end (12), not to the leftover at 8.
        assert (result.status, result.base_offset, result.new_start_offset) == ("removed", 4, 12)
        assert log.start_offset == 12
        assert _files(tmp_log_dir)[0] == "00000000000000000012.log"
        assert [r.offset for r in log.scan()][:2] == [12, 13]
    with CommitLog.open(tmp_log_dir) as writer:            # and the writer's open agrees
        assert writer.start_offset == 12 and writer.segments()[0].base_offset == 12


def test_head_removal_with_expected_base_never_names_a_leftover(tmp_log_dir):
    _build(tmp_log_dir)
    _compact_leaving_leftovers(tmp_log_dir, [0, 4], drop={1, 2, 5, 6, 7})
    with CommitLog.open(tmp_log_dir, readonly=True) as log:
        assert log.remove_head(expected_base=4).status == "mismatch"    # the head is 0
        assert log.remove_head(expected_base=0).new_start_offset == 8
        assert _files(tmp_log_dir)[0] == "00000000000000000008.log"


def test_cleaned_files_are_never_segments_to_a_reader_or_a_remover(tmp_log_dir):
    bases = _build(tmp_log_dir)
    cleaned = [segment_path(tmp_log_dir, 4) + CLEANED_SUFFIX,
               index_path(segment_path(tmp_log_dir, 4)) + CLEANED_SUFFIX]
    for p in cleaned:
        with open(p, "wb") as f:
            f.write(b"half a compaction output")
    with CommitLog.open(tmp_log_dir, readonly=True) as log:
        assert [s.base_offset for s in log.segments()] == bases
        assert log.remove_head().base_offset == 0
        assert log.remove_head().base_offset == 4
        assert log.read(8).offset == 8
        assert all(os.path.exists(p) for p in cleaned)   # the writer's open removes them, not we
    with CommitLog.open(tmp_log_dir):
        assert not any(os.path.exists(p) for p in cleaned)
