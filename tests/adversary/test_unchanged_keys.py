"""Change-driven passes attacked (issue 39): a file written in place whose mtime is put back
(os.utime) must still get its log planned again, or a segment outlives its deletion moment for as
long as nothing else moves. Real logs, real SQLite; the racy window is waited out."""

from __future__ import annotations

import os
import sqlite3
import time

from commitlog import CommitLog
from commitlog.layout import marks_path, state_path
from policies import parse_config
from retention.deletion.cleaner import Cleaner

from retention_helpers import make_log, segment_bases, set_age
from racy_window import RACY


def _cleaner(tmp, name: str) -> Cleaner:
    return Cleaner(parse_config(
        f"service:\n  audit: {tmp}/audit.jsonl\nlogs:\n  {name}:\n    path: {tmp / name}\n    segment_size: 4KiB\n"
        f"policies:\n  default:\n    delete_at_hours: {list(range(24))}\n    reserve: 1h\n"))


def _carried(cleaner: Cleaner) -> None:
    for _ in range(4):
        time.sleep(RACY)
        if all(r.unchanged for r in cleaner.run_pass().logs):
            return
    raise AssertionError("the log is planned every pass")


def _checkpoint(db: str) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")       # the commit in state.db itself, -wal empty
    conn.close()


def _put_back(path: str, st: os.stat_result) -> None:
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_group_commit_with_the_mtime_put_back_still_frees_what_it_read(tmp_path):
    bases = make_log(tmp_path / "a", 3)
    set_age(tmp_path / "a", bases[:-1], 7200)            # expired, kept only for etl, which read nothing
    db = state_path(str(tmp_path / "a"))
    with CommitLog.open(tmp_path / "a") as log:
        log.commit("etl", bases[0])
    _checkpoint(db)
    cleaner = _cleaner(tmp_path, "a")
    try:
        _carried(cleaner)
        before = os.stat(db)
        with CommitLog.open(tmp_path / "a") as log:
            log.commit("etl", bases[2])                  # etl has read the first two segments
        _checkpoint(db)
        _put_back(db, before)
        after = os.stat(db)
        assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)
        time.sleep(RACY)
        result = cleaner.run_pass()
        assert not result.logs[0].unchanged
        assert segment_bases(tmp_path / "a") == bases[2:], "what etl read outlived its deletion moment"
    finally:
        cleaner.close()


def test_a_byte_flipped_in_marks_with_the_mtime_put_back_plans_the_log_again(tmp_path):
    make_log(tmp_path / "a", 2)
    with CommitLog.open(tmp_path / "a") as log:
        log.mark_dead([0])
    marks = marks_path(str(tmp_path / "a"))
    cleaner = _cleaner(tmp_path, "a")
    try:
        _carried(cleaner)
        before = os.stat(marks)
        with open(marks, "r+b") as f:
            first = f.read(1)
            f.seek(0)
            f.write(bytes([first[0] ^ 0xFF]))
        _put_back(marks, before)
        time.sleep(RACY)
        assert not cleaner.run_pass().logs[0].unchanged, "a changed marks file was carried"
    finally:
        cleaner.close()
