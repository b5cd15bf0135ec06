"""Probes: a log directory whose meta.json is gone or holds values out of range."""

from __future__ import annotations

import json
import os

import pytest

from commitlog import CommitLog, CorruptLogError, UnsafeLogFileError
from commitlog.layout import META_FILE, START_OFFSET_FILE, STATE_FILE, segment_name
from commitlog.meta import refuse_orphaned


def _log_with_records(path: str) -> None:
    with CommitLog.open(path, 1 << 16) as log:
        for i in range(50):
            log.append(b"%d" % i * 100)


def test_a_writer_open_of_a_log_whose_meta_json_is_gone_is_refused_and_creates_nothing(tmp_path):
    path = str(tmp_path / "log")
    _log_with_records(path)
    os.unlink(os.path.join(path, META_FILE))
    before = sorted(os.listdir(path))
    with pytest.raises(CorruptLogError) as err:
        CommitLog.open(path)
    assert META_FILE in str(err.value) and "00000000000000000000.log" in str(err.value)
    assert sorted(os.listdir(path)) == before
    assert "Traceback" not in str(err.value)


@pytest.mark.parametrize("name", [START_OFFSET_FILE, STATE_FILE, segment_name(0)])
def test_a_link_planted_at_a_log_files_name_without_meta_json_is_named_as_the_link(tmp_path, name):
    """A link is the more precise finding than a log's files without meta.json: named first."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"not the store's")
    path = tmp_path / "log"
    path.mkdir()
    link = path / name
    link.symlink_to(victim)
    with pytest.raises(UnsafeLogFileError) as err:
        refuse_orphaned(str(path))
    assert err.value.path == str(link)
    with pytest.raises(UnsafeLogFileError) as err:
        CommitLog.open(str(path))
    assert err.value.path == str(link) and sorted(os.listdir(path)) == [name]
    assert victim.read_bytes() == b"not the store's"


def test_a_new_log_in_an_empty_directory_still_opens(tmp_path):
    path = tmp_path / "log"
    path.mkdir()
    with CommitLog.open(str(path)) as log:
        assert log.append(b"x") == 0


@pytest.mark.parametrize("meta, field", [
    ({"format": 2, "segment_size": 0}, "segment_size"),
    ({"format": 2, "segment_size": -4096}, "segment_size"),
    ({"format": 2, "segment_size": 1 << 40}, "segment_size"),
    ({"format": 2, "segment_size": 65536.5}, "segment_size"),
    ({"format": 2, "segment_size": "65536"}, "segment_size"),
    ({"format": 2, "segment_size": True}, "segment_size"),
    ({"format": 2}, "segment_size"),
    ({"format": 99, "segment_size": 65536}, "format 99"),
    ({"format": "2", "segment_size": 65536}, "format"),
    ({"format": -1, "segment_size": 65536}, "format"),
    ([1, 2], "JSON object"),
    ('{"format": 2, "segment_size": 1' + "0" * 5000 + "}", "unreadable"),
    ('{"format": 2, "segment_size": 65536, "x": ' + "[" * 5000 + "]" * 5000 + "}", "unreadable"),
])
@pytest.mark.parametrize("readonly", [False, True])
def test_meta_json_values_out_of_range_are_a_corrupt_log_naming_file_and_field(tmp_path, meta, field,
                                                                                readonly):
    path = str(tmp_path / "log")
    _log_with_records(path)
    meta_file = os.path.join(path, META_FILE)
    with open(meta_file, "w") as f:
        f.write(meta if isinstance(meta, str) else json.dumps(meta))
    with open(meta_file, "rb") as f:
        before = f.read()
    with pytest.raises(CorruptLogError) as err:
        CommitLog.open(path, readonly=readonly)
    message = str(err.value)
    assert meta_file in message and field in message and len(message) < 400
    with open(meta_file, "rb") as f:
        assert f.read() == before
