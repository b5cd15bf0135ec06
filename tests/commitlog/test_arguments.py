"""Hostile input to the Python API, tried as a new user would: each gets the project's own error,
one line naming the argument and what it got, and changes nothing."""

from __future__ import annotations

import math
import os

import pytest

from commitlog import (CommitLog, CommitLogError, InvalidArgumentError, InvalidCommitError,
                       NotALogError, OffsetOutOfRangeError, list_segments)

SEG = 64 * 1024


@pytest.fixture
def log(tmp_log_dir):
    with CommitLog.open(tmp_log_dir, segment_size=SEG, flush="none") as log:
        log.append_batch([b"a", b"b", b"c"])
        yield log


def _unchanged(log, end=3):
    assert log.end_offset == end
    assert [r.value for r in log.scan()] == [b"a", b"b", b"c"][:end]


def test_read_of_a_negative_offset_says_offsets_start_at_zero(log):
    with pytest.raises(OffsetOutOfRangeError) as err:
        log.read(-1)
    assert "negative" in str(err.value) and "removed by retention" not in str(err.value)
    print(err.value)


@pytest.mark.parametrize("offset", ["0", 1.0, None, True])
def test_read_of_a_non_int_offset_names_the_argument(log, offset):
    with pytest.raises(InvalidArgumentError, match="offset must be an int"):
        log.read(offset)


@pytest.mark.parametrize("value, key, kwargs, match", [
    (None, None, {}, r"value must be bytes-like .*got NoneType"),
    ("text", None, {}, r"value must be bytes-like .*got str \(encode it first\)"),
    (12, None, {}, r"value must be bytes-like .*got int"),
    (b"v", 7, {}, r"key must be bytes-like or None, got int"),
    (b"v", "k", {}, r"key must be bytes-like or None, got str"),
    (b"v", None, {"timestamp_ms": "now"}, r"timestamp_ms must be an int"),
    (b"v", None, {"timestamp_ms": 1.5}, r"timestamp_ms must be an int"),
    (b"v", None, {"attributes": 300}, r"attributes must be an int in \[0, 255\], got 300"),
    (b"v", None, {"attributes": -1}, r"attributes must be an int in \[0, 255\], got -1"),
    (b"x" * 70_000, "big key", {}, r"key must be bytes-like or None, got str"),
    ("x" * 70_000, None, {}, r"value must be bytes-like"),
])
def test_append_of_a_bad_record_names_the_argument_and_writes_nothing(log, value, key, kwargs,
                                                                      match):
    with pytest.raises(InvalidArgumentError, match=match) as err:
        log.append(value, key=key, **kwargs)
    assert isinstance(err.value, (TypeError, ValueError, CommitLogError))
    _unchanged(log)
    assert log.append(b"d") == 3  # the log still works


def test_append_batch_with_one_bad_value_writes_none_of_the_batch(log):
    with pytest.raises(InvalidArgumentError, match=r"value \[2\] of the batch must be bytes-like"):
        log.append_batch([b"x"] * 2 + ["text"] + [b"y"] * 100_000)
    with pytest.raises(InvalidArgumentError, match=r"value \[1\] of the batch"):
        log.append_batch([b"x", None, b"zz"])
    with pytest.raises(InvalidArgumentError, match=r"key \[1\] of the batch"):
        log.append_batch([b"x", b"y"], keys=[b"k", 5])
    with pytest.raises(InvalidArgumentError, match="keys has 1 items for 2 values"):
        log.append_batch([b"x", b"y"], keys=[b"k"])
    with pytest.raises(InvalidArgumentError, match="values must be an iterable"):
        log.append_batch(b"abc")
    with pytest.raises(InvalidArgumentError, match="attributes"):
        log.append_batch([b"x"], attributes=256)
    _unchanged(log)


@pytest.mark.parametrize("start, end, match", [
    (2, 1, "scan end 1 is before its start 2"),
    ("0", None, "start must be an int"),
    (None, 2.5, "end must be an int"),
    (None, -1, "end must be zero or positive"),
])
def test_scan_with_a_bad_range_names_it(log, start, end, match):
    with pytest.raises(InvalidArgumentError, match=match):
        log.scan(start, end)


@pytest.mark.parametrize("group, offset, match", [
    ("g", -1, "between 0 and the end offset 3"),
    ("g", 4, "between 0 and the end offset 3"),
    ("g", "2", "an offset is an int"),
    ("", 1, "non-empty printable string"),
    (None, 1, "non-empty printable string"),
    ("bad\nname", 1, "non-empty printable string"),
])
def test_commit_with_a_bad_offset_or_group_is_refused(log, group, offset, match):
    with pytest.raises(InvalidCommitError, match=match):
        log.commit(group, offset)
    assert log.committed() == {}


@pytest.mark.parametrize("kwargs, match", [
    ({"segment_size": -1}, "segment_size must be between 4096"),
    ({"segment_size": "64MiB"}, "segment_size must be an int"),
    ({"flush_interval": math.nan}, "flush_interval must be positive"),
    ({"flush_interval": "1"}, "flush_interval must be positive"),
    ({"block_timeout": -1}, "block_timeout"),
    ({"refuse_writes_ratio": 1.5}, "refuse_writes_ratio must be in"),
    ({"resume_ratio": 0.95}, "resume_ratio must be in"),
    ({"flush": "always"}, "flush must be one of sync, async, none"),
    ({"readonly": "yes"}, "readonly must be True or False"),
])
def test_bad_open_settings_name_the_setting_and_create_nothing(tmp_log_dir, kwargs, match):
    with pytest.raises(InvalidArgumentError, match=match):
        CommitLog.open(tmp_log_dir, **kwargs)
    assert not os.path.exists(tmp_log_dir)


def test_open_on_a_plain_file_is_not_a_log(tmp_path):
    plain = tmp_path / "notes.txt"
    plain.write_text("hello")
    for readonly in (False, True):
        with pytest.raises(NotALogError, match="it is a file, not a directory") as err:
            CommitLog.open(plain, readonly=readonly)
        assert err.value.path == str(plain)
    assert plain.read_text() == "hello"
    with pytest.raises(InvalidArgumentError, match="path must be a str"):
        CommitLog.open(42)


def test_readonly_open_of_a_directory_that_is_not_a_log(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(NotALogError, match="no meta.json") as err:
        CommitLog.open(empty, readonly=True)
    assert isinstance(err.value, FileNotFoundError)  # what callers caught before
    with pytest.raises(NotALogError, match="no such directory"):
        CommitLog.open(tmp_path / "missing", readonly=True)
    assert os.listdir(empty) == [] and not (tmp_path / "missing").exists()


def test_a_writer_refuses_a_directory_of_other_files_unless_asked_to_create(tmp_path):
    """A mistyped path (a home directory, a project) is not turned into a log: the error names the
    path, what is there and the way out; nothing is written beside the files. `create=True` makes
    the log there; a missing or empty directory, or a log's own locks alone, still just open."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("mine")
    with pytest.raises(NotALogError) as err:
        CommitLog.open(home, segment_size=SEG)
    assert str(home) in str(err.value) and "notes.txt" in str(err.value) and "create=True" in str(err.value)
    assert sorted(os.listdir(home)) == ["notes.txt"]
    with CommitLog.open(home, segment_size=SEG, create=True) as log:
        log.append(b"x")
    with CommitLog.open(home) as log:                      # a log now: no keyword needed again
        assert log.end_offset == 1 and (home / "notes.txt").read_text() == "mine"
    empty = tmp_path / "empty"
    empty.mkdir()
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / ".lock").write_text("")         # a first open that crashed before meta.json
    for fresh in (tmp_path / "missing" / "log", empty, tmp_path / "locked"):
        with CommitLog.open(fresh, segment_size=SEG) as log:
            assert log.append(b"y") == 0


def test_a_refused_record_leaves_the_listing_as_it_was(tmp_log_dir):
    with CommitLog.open(tmp_log_dir, segment_size=4096, flush="none") as log:
        for _ in range(3):
            log.append(b"v" * 1000)
        before = list_segments(tmp_log_dir).bases
        with pytest.raises(InvalidArgumentError):
            log.append("v" * 2000)  # would roll if it were bytes
        assert list_segments(tmp_log_dir).bases == before
