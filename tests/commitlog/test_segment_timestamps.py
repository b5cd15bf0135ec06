"""A segment's first and last timestamps as `segments()` reports them, however records arrive:
one by one, in batches, or both mixed, in the same open and after reopening.

Before: after `append()` then `append_batch()`, the active segment's `first_timestamp_ms` was the
batch's timestamp, not the first record's, until the log was reopened."""

from __future__ import annotations

import pytest

from commitlog import CommitLog


@pytest.mark.parametrize("first_way, then_way", [("append", "batch"), ("batch", "append"),
                                                  ("batch", "batch"), ("append", "append")])
def test_the_active_segments_first_timestamp_is_its_first_records_whichever_way_it_came(
        tmp_log_dir, first_way, then_way):
    def write(log, way, ts, n):
        if way == "append":
            for i in range(n):
                log.append(b"v%d" % i, timestamp_ms=ts)
        else:
            log.append_batch([b"b%d" % i for i in range(n)], timestamp_ms=ts)

    with CommitLog.open(tmp_log_dir, segment_size=1 << 20) as log:
        write(log, first_way, 1_000, 3)
        write(log, then_way, 9_000, 3)
        [active] = log.segments()
        assert (active.first_timestamp_ms, active.last_timestamp_ms) == (1_000, 9_000)
    with CommitLog.open(tmp_log_dir, readonly=True) as again:
        [active] = again.segments()
        assert (active.first_timestamp_ms, active.last_timestamp_ms) == (1_000, 9_000)


def test_a_rolled_segments_first_timestamp_is_the_first_record_after_the_roll(tmp_log_dir):
    with CommitLog.open(tmp_log_dir, segment_size=4096) as log:
        ts = 1_000
        while len(log.segments()) < 2:
            log.append(b"x" * 100, timestamp_ms=ts)
            ts += 1
        log.append_batch([b"y" * 10] * 3, timestamp_ms=50_000)
        first, second = log.segments()
        assert first.first_timestamp_ms == 1_000
        assert second.first_timestamp_ms == ts - 1 and second.last_timestamp_ms == 50_000
