"""Lookup by time: CommitLog.offset_for_time against a brute-force scan, on real segment files."""

from __future__ import annotations

import pytest

from commitlog import CommitLog, InvalidArgumentError

SEG = 4096
VALUE = b"v" * 90            # about 30 records per segment: the lookup crosses many segments


def ts_of(i: int) -> int:
    return 1_000_000 + (i // 3) * 10          # three records share each timestamp


def write(log: CommitLog, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        log.append(VALUE, timestamp_ms=ts_of(i))


def brute_force(log: CommitLog, ts: int) -> int | None:
    return next((r.offset for r in log.scan() if r.timestamp_ms >= ts), None)


def test_every_timestamp_finds_the_first_record_at_or_after_it(tmp_path):
    with CommitLog.open(tmp_path / "log", segment_size=SEG) as log:
        write(log, 1500)
        assert len(log.segments()) > 40
        for ts in range(ts_of(0) - 5, ts_of(1499) + 15, 3):
            assert log.offset_for_time(ts) == brute_force(log, ts), ts
        assert log.offset_for_time(ts_of(0) - 10**9) == 0            # before the first record
        assert log.offset_for_time(ts_of(1499)) == 1497               # the last timestamp's first
        assert log.offset_for_time(ts_of(1499) + 1) is None           # after the last


def test_an_empty_log_and_a_fresh_segment_answer_none(tmp_path):
    with CommitLog.open(tmp_path / "log", segment_size=SEG) as log:
        assert log.offset_for_time(0) is None
        log.append(VALUE, timestamp_ms=5)
        assert log.offset_for_time(0) == 0 and log.offset_for_time(6) is None


def test_a_reader_in_another_handle_sees_the_writers_unsealed_segment(tmp_path):
    path = tmp_path / "log"
    with CommitLog.open(path, segment_size=SEG) as writer:
        write(writer, 200)
        with CommitLog.open(path, readonly=True) as reader:
            assert reader.offset_for_time(ts_of(199)) == 198
            write(writer, 5, start=200)                               # into the live segment
            assert reader.offset_for_time(ts_of(204)) == 204
            assert reader.offset_for_time(ts_of(204) + 1) is None
            for ts in range(ts_of(0), ts_of(204) + 1, 7):
                assert reader.offset_for_time(ts) == brute_force(writer, ts)


def test_removed_head_answers_from_the_start_offset(tmp_path):
    with CommitLog.open(tmp_path / "log", segment_size=SEG) as log:
        write(log, 600)
        for _ in range(5):
            log.remove_head()
        start = log.start_offset
        assert start > 0
        assert log.offset_for_time(ts_of(0)) == start                 # its own record is gone
        assert log.offset_for_time(ts_of(start + 10)) == brute_force(log, ts_of(start + 10))


def test_dead_records_are_never_the_answer(tmp_path):
    with CommitLog.open(tmp_path / "log", segment_size=SEG) as log:
        write(log, 300)
        ts = ts_of(150)                        # records 150, 151, 152 share it
        assert log.offset_for_time(ts) == 150
        log.mark_dead([150, 151])
        assert log.offset_for_time(ts) == 152
        log.mark_dead([152])
        assert log.offset_for_time(ts) == 153                         # the next timestamp's


def test_a_compacted_log_with_gaps_answers_across_them(tmp_path):
    with CommitLog.open(tmp_path / "log", segment_size=SEG) as log:
        write(log, 900)
        sealed = [s for s in log.segments()[:-1]]
        doomed = range(sealed[3].base_offset, sealed[9].end_offset - 2)   # most of 4..9 dead
        log.mark_dead(doomed)
        log.compact([[s.base_offset for s in sealed[3:10]]], lambda o, k, t, m: "dead" if m else None)
        assert len(log.segments()) < len(sealed) + 1                    # merged: gaps now
        for ts in range(ts_of(0), ts_of(899) + 1, 4):
            assert log.offset_for_time(ts) == brute_force(log, ts), ts
        assert log.offset_for_time(ts_of(doomed.start)) == doomed.stop  # inside the gap: after it


def test_timestamps_that_go_back_never_give_an_older_record(tmp_path):
    # Exact only for timestamps that never decrease; otherwise never a record older than asked.
    with CommitLog.open(tmp_path / "log", segment_size=SEG) as log:
        stamps = [(i * 7919) % 1000 for i in range(400)]
        for stamp in stamps:
            log.append(VALUE, timestamp_ms=stamp)
        for ts in range(0, 1001, 13):
            found = log.offset_for_time(ts)
            assert found is None or stamps[found] >= ts


@pytest.mark.parametrize("bad", ["5", 5.0, True, None])
def test_a_timestamp_that_is_not_an_int_is_refused(tmp_path, bad):
    with CommitLog.open(tmp_path / "log", segment_size=SEG) as log:
        with pytest.raises(InvalidArgumentError, match="timestamp_ms must be an int"):
            log.offset_for_time(bad)


@pytest.mark.parametrize("reopen", [False, True], ids=["active-index", "sealed-index"])
def test_the_index_search_inside_a_large_segment_lands_on_the_first_late_record(tmp_path, reopen):
    # 256 KiB segments hold ~2,300 records and ~60 index entries each: the answer is found by
    # the entries' records' timestamps, then a scan of one interval.
    path = tmp_path / "log"
    with CommitLog.open(path, segment_size=256 * 1024) as log:
        write(log, 6000)
    with CommitLog.open(path, readonly=reopen) as log:
        assert len(log.segments()) == 3
        for ts in range(ts_of(0), ts_of(5999) + 1, 37):
            assert log.offset_for_time(ts) == brute_force(log, ts), ts


def test_a_writer_whose_head_another_handle_removed_answers_from_the_new_start(tmp_path):
    path = tmp_path / "log"
    with CommitLog.open(path, segment_size=SEG) as writer:
        write(writer, 600)
        with CommitLog.open(path, readonly=True) as sidecar:   # as the retention sidecar does
            for _ in range(4):
                sidecar.remove_head()
            start = sidecar.start_offset
        assert writer.offset_for_time(ts_of(0)) == start
        assert writer.offset_for_time(ts_of(start + 40)) == brute_force(writer, ts_of(start + 40))


def test_a_timezone_aware_datetime_is_the_same_instant_in_ms_and_a_naive_one_is_refused(tmp_path):
    from datetime import datetime, timedelta, timezone
    with CommitLog.open(tmp_path / "log", segment_size=SEG) as log:
        write(log, 300)
        for i in (0, 1, 150, 299):
            ms = ts_of(i) + 1
            utc = datetime.fromtimestamp(ms / 1000, timezone.utc)
            berlin = utc.astimezone(timezone(timedelta(hours=1)))
            assert log.offset_for_time(utc) == log.offset_for_time(berlin) == log.offset_for_time(ms), i
        with pytest.raises(InvalidArgumentError, match="naive datetime .* names no timezone") as err:
            log.offset_for_time(datetime(2026, 11, 24, 12, 0))
        assert len(str(err.value).splitlines()) == 1
        with pytest.raises(InvalidArgumentError, match="must be an int"):
            log.offset_for_time("2026-11-24")
