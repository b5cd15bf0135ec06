"""A state.db whose values are not offsets (SQLite keeps whatever a column is given: an edited or
damaged database) is a CorruptLogError naming it, never a TypeError in whoever compares the offsets."""

from __future__ import annotations

import sqlite3

import pytest

from commitlog import CommitLog, CorruptLogError


def _log_with_a_group(path):
    with CommitLog.open(path, segment_size=4096, flush="none") as log:
        log.append_batch([b"x" * 100] * 50)
        log.commit("etl", 10)


@pytest.mark.parametrize("value", ["x", -1, 1.5, b"\x01"])
def test_a_committed_offset_that_is_not_an_offset_is_corrupt_state(tmp_log_dir, value):
    _log_with_a_group(tmp_log_dir)
    with sqlite3.connect(f"{tmp_log_dir}/state.db") as db:
        db.execute("UPDATE consumer_groups SET committed_offset = ?", (value,))
    db.close()
    with CommitLog.open(tmp_log_dir, readonly=True) as log:
        with pytest.raises(CorruptLogError, match="state.db.*group 'etl'.s committed offset"):
            log.committed()


def test_a_commit_time_that_is_not_a_time_is_corrupt_state(tmp_log_dir):
    _log_with_a_group(tmp_log_dir)
    with sqlite3.connect(f"{tmp_log_dir}/state.db") as db:
        db.execute("UPDATE consumer_groups SET committed_at = 'yesterday'")
    db.close()
    with CommitLog.open(tmp_log_dir, readonly=True) as log:
        with pytest.raises(CorruptLogError, match="commit time"):
            log.commit_times()
