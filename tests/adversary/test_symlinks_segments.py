"""Issue 34, part 2: a segment or index replaced by a symbolic link (`00000000000000000033.log ->
/etc/shadow`) is a store error naming the file: never served, truncated, preallocated, uploaded
or deleted through; a retention pass reports the log as failing and deletes nothing. A log
directory that is itself a link (the operator's choice) keeps working."""

from __future__ import annotations

import os
import textwrap
from datetime import datetime, timedelta, timezone

import pytest

from commitlog import CommitLog, UnsafeLogFileError
from policies import load_config
from retention import Cleaner

from symlinks_helpers import RECORD, SEGMENT, VICTIM, VICTIM_MTIME_NS


def _log(path, segments=4):
    with CommitLog.open(path, segment_size=SEGMENT, flush="none") as log:
        while len(log.segments()) < segments:
            log.append_batch([RECORD] * 16)
        return [s.base_offset for s in log.segments()]


def _victim(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(VICTIM)
    os.utime(victim, ns=(VICTIM_MTIME_NS, VICTIM_MTIME_NS))
    return victim


def _untouched(victim):
    return victim.read_bytes() == VICTIM and victim.stat().st_mtime_ns == VICTIM_MTIME_NS


def _plant(path, victim):
    os.unlink(path)
    os.symlink(victim, path)


@pytest.mark.parametrize("readonly", [False, True])
def test_a_segment_replaced_by_a_link_is_refused_by_name_at_open(tmp_path, readonly):
    bases = _log(tmp_path / "log")
    victim = _victim(tmp_path)
    planted = tmp_path / "log" / f"{bases[1]:020d}.log"
    _plant(planted, victim)
    with pytest.raises(UnsafeLogFileError) as refused:
        CommitLog.open(tmp_path / "log", readonly=readonly)
    assert refused.value.path == str(planted) and str(planted) in str(refused.value)
    assert _untouched(victim)


def test_the_active_index_replaced_by_a_link_is_never_written_through(tmp_path):
    bases = _log(tmp_path / "log")
    planted = tmp_path / "log" / f"{bases[-1]:020d}.index"
    victim = tmp_path / "victim"     # the index's size: the writer would reuse it, mapped
    before = b"v" * os.path.getsize(planted)
    victim.write_bytes(before)
    os.utime(victim, ns=(VICTIM_MTIME_NS, VICTIM_MTIME_NS))
    _plant(planted, victim)
    try:
        with CommitLog.open(tmp_path / "log", segment_size=SEGMENT, flush="none") as log:
            log.append_batch([RECORD] * 40)
    except UnsafeLogFileError as exc:
        assert exc.path == str(planted)
    assert victim.read_bytes() == before and victim.stat().st_mtime_ns == VICTIM_MTIME_NS


def test_a_pass_over_a_log_with_a_planted_segment_link_fails_and_deletes_nothing(tmp_path):
    bases = _log(tmp_path / "staging", 6)
    victim = _victim(tmp_path)
    planted = tmp_path / "staging" / f"{bases[0]:020d}.log"
    _plant(planted, victim)
    old = (datetime.now(timezone.utc) - timedelta(days=30)).timestamp()
    for base in bases[1:-1]:
        os.utime(tmp_path / "staging" / f"{base:020d}.log", (old, old))
    config_path = tmp_path / "retention.yaml"
    config_path.write_text(textwrap.dedent(f"""\
        service: {{audit: {tmp_path / 'audit.jsonl'}}}
        logs: {{staging: {{path: {tmp_path / 'staging'}, segment_size: 4KiB}}}}
        policies: {{default: {{delete_at_hours: [], reserve: 1h, files_per_pass: 10,
                               pause_between_files: 0ms}}}}
        """))
    cleaner = Cleaner(load_config(config_path, base_dir=tmp_path))
    try:
        cleaner.trigger_manual()
        result = cleaner.run_pass()
    finally:
        cleaner.close()
    assert result.failed and result.deleted == 0
    assert str(planted) in result.logs[0].error and "symbolic link" in result.logs[0].error
    assert planted.is_symlink() and _untouched(victim)
    assert all((tmp_path / "staging" / f"{b:020d}.log").is_file() for b in bases[1:])


def test_a_log_directory_that_is_itself_a_link_keeps_working(tmp_path):
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "log")
    _log(tmp_path / "log")
    with CommitLog.open(tmp_path / "log") as log:
        log.commit("etl", 3)
        log.mark_dead([0, 1])
        log.remove_head(force=True)
        assert log.committed() == {"etl": 3} and sum(1 for _ in log.scan()) > 0
