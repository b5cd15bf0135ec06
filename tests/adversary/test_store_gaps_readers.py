"""Issue 34, items 8 and 12: a log tells the offsets retention removed (OffsetOutOfRangeError)
from those a compaction removed (passed silently) from those nobody recorded removing
(CorruptLogError naming the range or the file): a scan created before a compaction, a read, a
deleted middle or first segment, a renamed one, and a log an older store compacted or that
predates start.offset (commitlog.gaps)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from store_gaps_helpers import SEG, compact_junk, dead_only, junk_log, one_key_log, value

from commitlog import CommitLog, CorruptLogError, OffsetOutOfRangeError, OffsetRemovedError, UnsafeLogFileError
from commitlog.layout import index_path, segment_path


def recorded(path: str) -> list[tuple[int, int]]:
    from commitlog import gaps
    return gaps.read(path).pairs()


def compacted_path(path: str) -> str:
    return os.path.join(path, "compacted")


def test_a_scan_created_before_a_compaction_passes_the_compactions_gap(tmp_path):
    path = str(tmp_path / "log")
    bases = one_key_log(path)
    with CommitLog.open(path) as log:
        it = log.scan()
        outs = log.compact([bases[:-1]], lambda o, k, t, m: "superseded" if o < 99 else None)
        assert [o.segment for o in outs] == [None]          # all dead: the head segments went
        assert log.start_offset == bases[-1] and log.retention_start_offset == 0
        first = next(it)                                    # was OffsetOutOfRangeError
        assert (first.offset, first.value) == (bases[-1], value(bases[-1]))
        assert [r.offset for r in log.scan(0)] == list(range(bases[-1], 100))
        with pytest.raises(OffsetRemovedError) as err:
            log.read(3)
        assert err.value.next_offset == bases[-1]
    with CommitLog.open(path, readonly=True) as log:        # another reader, a fresh open
        assert log.retention_start_offset == 0
        assert next(iter(log.scan(0))).offset == bases[-1]


def test_retention_after_a_compaction_is_still_reported_as_retention(tmp_path):
    path = str(tmp_path / "log")
    bases, dead = junk_log(path)
    compact_junk(path)
    with CommitLog.open(path) as log:
        assert log.remove_head().status == "removed"       # bases[0], kept by the compaction
        with pytest.raises(OffsetOutOfRangeError, match="removed by retention"):
            next(iter(log.scan(0)))
        with pytest.raises(OffsetOutOfRangeError):
            log.read(0)
        # The start moved to the next segment file, past the compaction's gap [b1, b2).
        assert log.retention_start_offset == log.start_offset == bases[2]
        got = [r.offset for r in log.scan(bases[2])]
    assert got == [o for o in range(bases[2], 300) if o not in dead]


def test_a_compactions_middle_gaps_are_recorded_and_passed(tmp_path):
    path = str(tmp_path / "log")
    bases, dead = junk_log(path)
    outs = compact_junk(path)
    assert [o.segment for o in outs if o.segment is None] == [None, None, None]
    assert recorded(path) == [(bases[1], bases[2]), (bases[3], bases[5])]
    with CommitLog.open(path, readonly=True) as log:
        assert [r.offset for r in log.scan()] == [o for o in range(300) if o not in dead]
        with pytest.raises(OffsetRemovedError):
            log.read(bases[3] + 1)


def test_a_read_beside_a_segment_another_handle_compacted_away_is_served(tmp_path):
    path = str(tmp_path / "log")
    bases, _ = junk_log(path)
    with CommitLog.open(path) as log:                       # its list still names bases[1]
        with CommitLog.open(path, readonly=True) as other:
            other.compact([[bases[1]]], dead_only)
        assert log.read(bases[2] + 1).offset == bases[2] + 1


def _delete(path: str, base: int) -> None:
    os.unlink(segment_path(path, base))
    if os.path.exists(index_path(segment_path(path, base))):
        os.unlink(index_path(segment_path(path, base)))


def test_a_deleted_middle_segment_is_corrupt_naming_the_range(tmp_path):
    path = str(tmp_path / "log")
    bases, _ = junk_log(path)
    with CommitLog.open(path) as log:
        log.mark_dead([])                                   # nothing compacted: no record
    _delete(path, bases[2])
    want = f"offsets [{bases[2]}, {bases[3]}) are missing"
    for readonly in (True, False):
        with CommitLog.open(path, readonly=readonly) as log:
            with pytest.raises(CorruptLogError, match=want.replace("[", r"\[").replace(")", r"\)")) as err:
                list(log.scan())
            assert err.value.path == segment_path(path, bases[3])
            with pytest.raises(CorruptLogError, match="no compaction recorded"):
                log.read(bases[2] + 5)
            assert log.read(bases[5]).offset == bases[5]   # what is there is still served


def test_a_deleted_segment_beside_a_compactions_gap_is_still_corrupt(tmp_path):
    path = str(tmp_path / "log")
    bases, _ = junk_log(path)
    compact_junk(path)                                      # gaps [b1, b2) and [b3, b5)
    _delete(path, bases[2])                                 # joins them: [b1, b5) all missing
    with CommitLog.open(path, readonly=True) as log:
        with pytest.raises(CorruptLogError, match=rf"offsets \[{bases[2]}, {bases[3]}\)"):
            list(log.scan())


def test_a_segment_renamed_over_the_previous_ones_offsets_is_corrupt_naming_the_file(tmp_path):
    path = str(tmp_path / "log")
    bases = one_key_log(path, 120)
    renamed = segment_path(path, bases[2] - 5)
    os.rename(segment_path(path, bases[2]), renamed)        # its records at wrong offsets
    os.unlink(index_path(segment_path(path, bases[2])))
    with CommitLog.open(path, readonly=True) as log:
        with pytest.raises(CorruptLogError) as err:
            list(log.scan())
        assert err.value.path == renamed and "renamed" in str(err.value)
        with pytest.raises(CorruptLogError) as err:
            log.read(bases[2] - 2)                          # was served from the renamed file
        assert err.value.path == renamed


def test_a_segment_renamed_past_its_offsets_is_corrupt(tmp_path):
    path = str(tmp_path / "log")
    bases = one_key_log(path, 120)
    os.rename(segment_path(path, bases[2]), segment_path(path, bases[2] + 3))
    with CommitLog.open(path, readonly=True) as log:
        with pytest.raises(CorruptLogError, match=rf"offsets \[{bases[2]}, {bases[2] + 3}\)"):
            list(log.scan())


def test_a_log_an_older_store_compacted_keeps_reading_and_adopts_its_gaps(tmp_path):
    path = str(tmp_path / "log")
    bases, dead = junk_log(path)
    compact_junk(path)
    os.unlink(compacted_path(path))                         # as an older store left it
    with CommitLog.open(path, readonly=True) as log:
        assert [r.offset for r in log.scan()] == [o for o in range(300) if o not in dead]
    with CommitLog.open(path) as log:                       # the writer's open adopts them
        assert recorded(path) == [(bases[1], bases[2]), (bases[3], bases[5])]
        assert [r.offset for r in log.scan()] == [o for o in range(300) if o not in dead]


def test_the_record_is_pruned_once_retention_passes_it(tmp_path):
    path = str(tmp_path / "log")
    bases, _ = junk_log(path)
    compact_junk(path)
    with CommitLog.open(path) as log:
        assert log.remove_head().status == "removed"       # the start moves to bases[2]
        log.append(b"more")
        assert log.remove_head().status == "removed"       # and past the second gap
        for o in range(log.end_offset, log.end_offset + 40):
            log.append(value(o))
        sealed = [s.base_offset for s in log.segments()[:-1]]
        log.compact([sealed[-1:]], dead_only)               # its next compaction prunes it
    assert recorded(path) == []


def test_a_symlink_planted_at_the_records_names_is_never_followed(tmp_path):
    path = str(tmp_path / "log")
    bases, _ = junk_log(path)
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    os.symlink(victim, compacted_path(path) + ".tmp")
    compact_junk(path)
    assert victim.read_bytes() == b"precious"
    assert not os.path.islink(compacted_path(path))
    os.unlink(compacted_path(path))
    os.symlink(victim, compacted_path(path))
    with CommitLog.open(path, readonly=True) as log:
        with pytest.raises(UnsafeLogFileError, match="compacted"):
            list(log.scan())
    assert victim.read_bytes() == b"precious"


def test_the_issues_reproduction_with_retention_compact_in_another_process(tmp_path):
    """One key written 100 times to 4 KiB segments, `it = log.scan()`, `retention compact` (a
    real process), `next(it)`: was OffsetOutOfRangeError "removed by retention"."""
    path = str(tmp_path / "log")
    bases = one_key_log(path)
    config = tmp_path / "retention.yaml"
    config.write_text(f"""
service:
  listen: 127.0.0.1:0
  audit: {tmp_path / "audit.jsonl"}
logs:
  a:
    path: {path}
    segment_size: 4KiB
policies:
  default:
    interval: 1h
    delete_at_hours: []
    compaction:
      keys: true
""")
    with CommitLog.open(path) as log, CommitLog.open(path, readonly=True) as reader:
        it, other = log.scan(), reader.scan()
        subprocess.run([sys.executable, "-m", "retention.cli", "compact", "--config", str(config)],
                       check=True, capture_output=True, timeout=120)
        assert not os.path.exists(segment_path(path, 0))
        assert next(it).offset == next(other).offset == bases[-1]
        assert log.retention_start_offset == reader.retention_start_offset == 0


def _head_deleted(path: str) -> list[int]:
    """A log whose first segment was deleted by hand: retention removed nothing (start.offset
    says 0), no compaction ran. The bases it had."""
    with CommitLog.open(path, segment_size=SEG) as log:
        for o in range(100):
            log.append(value(o))
        log.commit("etl", 5)
        bases = [s.base_offset for s in log.segments()]
    assert os.path.exists(os.path.join(path, "start.offset"))
    _delete(path, bases[0])
    return bases


def test_a_first_segment_deleted_by_hand_is_corrupt_naming_the_range_not_retentions(tmp_path):
    from types import SimpleNamespace
    from commitlog.spark.reading.reader import check_lost
    path = str(tmp_path / "log")
    bases = _head_deleted(path)
    want = rf"offsets \[0, {bases[1]}\) are missing before this segment"
    for readonly in (True, False):
        with CommitLog.open(path, readonly=readonly) as log:
            with pytest.raises(CorruptLogError, match=want) as err:
                list(log.scan())                            # was: started at bases[1], silently
            assert err.value.path == segment_path(path, bases[1])
            with pytest.raises(CorruptLogError, match=want):
                log.read(5)                                 # was: "removed by retention"
            with pytest.raises(CorruptLogError, match=want):
                log.scan(0)
            with pytest.raises(CorruptLogError, match=want):
                log.retention_start_offset
            with pytest.raises(CorruptLogError, match=want):
                log.offset_for_time(0)
            options = SimpleNamespace(path=path, fail_on_data_loss=False)
            with pytest.raises(CorruptLogError, match=want):
                check_lost(options, log, 5, "etl")          # was: a data-loss warning, skipped


def test_a_hand_deleted_head_beside_a_compactions_recorded_gap_is_corrupt(tmp_path):
    path = str(tmp_path / "log")
    bases, _ = junk_log(path)
    compact_junk(path, dropped_only=True)                   # records [b1, b2): b0 kept
    _delete(path, bases[0])
    with CommitLog.open(path, readonly=True) as log:
        for start in (None, 0):
            with pytest.raises(CorruptLogError, match=rf"offsets \[0, {bases[1]}\)"):
                list(log.scan() if start is None else log.scan(start))


def test_head_removal_and_a_compaction_of_the_head_raise_no_false_alarm(tmp_path):
    path = str(tmp_path / "log")
    with CommitLog.open(path, segment_size=SEG) as log:     # brand new: start.offset at 0
        assert os.path.exists(os.path.join(path, "start.offset"))
        assert list(log.scan()) == [] and log.retention_start_offset == 0
        for o in range(100):
            log.append(value(o))
        bases = [s.base_offset for s in log.segments()]
        assert log.remove_head().status == "removed"
        assert log.retention_start_offset == bases[1]
        with pytest.raises(OffsetOutOfRangeError, match="removed by retention"):
            log.read(0)
    with CommitLog.open(path, readonly=True) as log:
        assert [r.offset for r in log.scan()] == list(range(bases[1], 100))
    path = str(tmp_path / "head")
    bases, dead = junk_log(path, head=True)                 # the first two segments dead
    compact_junk(path, dropped_only=True)
    with CommitLog.open(path, readonly=True) as log:
        assert log.retention_start_offset == 0
        assert [r.offset for r in log.scan(0)] == [o for o in range(300) if o not in dead]


def test_a_log_from_before_start_offset_keeps_its_head_gap_as_retentions(tmp_path):
    """Its full-disk head removal unlinked before recording the advance: the gap is taken for
    retention's, and the writer's open creates start.offset past it (no false alarm after)."""
    path = str(tmp_path / "log")
    bases = _head_deleted(path)
    os.unlink(os.path.join(path, "start.offset"))
    for readonly in (True, False):
        with CommitLog.open(path, readonly=readonly) as log:
            assert log.retention_start_offset == bases[1]
            with pytest.raises(OffsetOutOfRangeError, match="removed by retention"):
                log.read(5)
            assert next(iter(log.scan())).offset == bases[1]
    from commitlog.startoffset import StartOffsetFile
    f = StartOffsetFile.open(os.path.join(path, "start.offset"))
    assert f is not None and f.value() == bases[1]
    f.close()
    with CommitLog.open(path, readonly=True) as log:
        assert [r.offset for r in log.scan()] == list(range(bases[1], 100))


def test_a_removal_killed_between_its_advance_and_its_unlink_is_no_false_alarm(tmp_path):
    """start.offset advanced, the segment still there (SIGKILL in between): the start is above
    the first segment's base, retention's, and the writer's open finishes the removal."""
    from commitlog.startoffset import StartOffsetFile
    path = str(tmp_path / "log")
    with CommitLog.open(path, segment_size=SEG) as log:
        for o in range(100):
            log.append(value(o))
        bases = [s.base_offset for s in log.segments()]
    f = StartOffsetFile.open(os.path.join(path, "start.offset"))
    f.advance(bases[1])
    f.close()
    with CommitLog.open(path, readonly=True) as log:
        assert log.retention_start_offset == bases[1]
        with pytest.raises(OffsetOutOfRangeError, match="removed by retention"):
            log.read(0)
        assert [r.offset for r in log.scan()] == list(range(bases[1], 100))
    with CommitLog.open(path) as log:
        assert not os.path.exists(segment_path(path, bases[0]))
        assert next(iter(log.scan())).offset == bases[1]
