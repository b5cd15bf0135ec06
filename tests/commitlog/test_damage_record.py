"""The log's damage record (commitlog.damage): entries only grow, an unreadable file is named, a
symlink planted at its name is never followed."""

from __future__ import annotations

import json
import logging
import os

from commitlog.damage import (RECORD_LOST, UNREADABLE, entry, read_damage, record_damage)
from commitlog.layout import DAMAGE_FILE


def _entry(n: int) -> dict:
    return entry(f"/x/{n:020d}.log", 100 + n, 42, RECORD_LOST, (n, n + 1), "a record does not verify")


def test_entries_are_added_to_the_ones_recorded_before(tmp_path):
    record_damage(str(tmp_path), [_entry(1)])
    record_damage(str(tmp_path), [_entry(2), _entry(3)])
    assert [e["offsets"] for e in read_damage(str(tmp_path))] == [[1, 2], [2, 3], [3, 4]]
    assert not os.path.exists(tmp_path / (DAMAGE_FILE + ".tmp"))


def test_no_entries_writes_nothing(tmp_path):
    record_damage(str(tmp_path), [])
    assert os.listdir(tmp_path) == []


def test_an_unreadable_record_reads_as_one_entry_saying_so(tmp_path):
    for junk in (b"{", b"[]", b'{"entries": [1]}', b"x" * (2 << 20)):
        (tmp_path / DAMAGE_FILE).write_bytes(junk)
        [e] = read_damage(str(tmp_path))
        assert e["kind"] == UNREADABLE and DAMAGE_FILE in e["detail"] and len(e["detail"]) < 300


def test_a_symlink_at_its_name_is_replaced_never_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    log = tmp_path / "log"
    log.mkdir()
    os.symlink(victim, log / DAMAGE_FILE)
    os.symlink(victim, log / (DAMAGE_FILE + ".tmp"))
    [e] = read_damage(str(log))
    assert e["kind"] == UNREADABLE
    record_damage(str(log), [_entry(1)])
    assert victim.read_text() == "keep me"
    assert not os.path.islink(log / DAMAGE_FILE)
    assert json.loads((log / DAMAGE_FILE).read_text())["entries"][0]["offsets"] == [1, 2]


def test_a_symlink_at_either_name_is_named_at_error(tmp_path, caplog):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    log = tmp_path / "log"
    log.mkdir()
    for name in (DAMAGE_FILE, DAMAGE_FILE + ".tmp"):
        os.symlink(victim, log / name)
    [e] = read_damage(str(log))
    assert str(log / DAMAGE_FILE) in e["detail"] and "symbolic link" in e["detail"]
    with caplog.at_level(logging.ERROR, logger="commitlog"):
        record_damage(str(log), [_entry(1)])
    lines = " ".join(r.getMessage() for r in caplog.records)
    assert str(log / DAMAGE_FILE) in lines and str(log / (DAMAGE_FILE + ".tmp")) in lines
    assert victim.read_text() == "keep me"
