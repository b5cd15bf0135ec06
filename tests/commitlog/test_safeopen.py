"""commitlog.safeopen: opening a log directory's files never follows a symbolic link, and
commitlog.layout.layout_names lists every name of the layout table."""

from __future__ import annotations

import os

import pytest

from commitlog import UnsafeLogFileError, layout
from commitlog.safeopen import connect_sqlite, no_follow, open_file, temporary


@pytest.fixture
def victim(tmp_path):
    path = tmp_path / "victim"
    path.write_bytes(b"victim")
    return path


def test_a_link_is_refused_naming_the_file_and_a_missing_file_is_not_found(tmp_path, victim):
    os.symlink(victim, tmp_path / ".lock")
    with pytest.raises(UnsafeLogFileError, match=str(tmp_path / ".lock")) as refused:
        open_file(str(tmp_path / ".lock"), os.O_RDWR | os.O_CREAT)
    assert refused.value.path == str(tmp_path / ".lock")
    with pytest.raises(UnsafeLogFileError):
        open(tmp_path / ".lock", "rb", opener=no_follow)
    with pytest.raises(FileNotFoundError):
        open_file(str(tmp_path / "marks"), os.O_RDWR)
    assert victim.read_bytes() == b"victim"


def test_a_temporary_reuses_a_crashed_writers_leftover_emptied(tmp_path):
    tmp = tmp_path / "meta.json.tmp"
    tmp.write_bytes(b"half a file from before the crash, longer than what follows")
    with open(tmp, "w", opener=temporary) as f:
        f.write("{}")
    assert tmp.read_text() == "{}"


def test_a_temporary_never_writes_into_a_file_with_another_hard_link(tmp_path, victim):
    tmp = tmp_path / "meta.json.tmp"
    os.link(victim, tmp)                 # a crash's leftover, or a hard link planted there
    with open(tmp, "w", opener=temporary) as f:
        f.write("{}")
    assert tmp.read_text() == "{}" and victim.read_bytes() == b"victim"


@pytest.mark.parametrize("planted", ["link", "directory"])
def test_a_temporary_refuses_what_is_not_a_regular_file_and_leaves_it(tmp_path, victim, planted):
    tmp = tmp_path / "marks.tmp"
    if planted == "link":
        os.symlink(victim, tmp)
    else:
        tmp.mkdir()
    with pytest.raises(UnsafeLogFileError, match=planted.replace("link", "symbolic link")):
        temporary(str(tmp), os.O_WRONLY)
    assert tmp.is_symlink() if planted == "link" else tmp.is_dir()
    assert victim.read_bytes() == b"victim"


@pytest.mark.parametrize("side", ["", "-wal", "-shm", "-journal"])
def test_sqlite_refuses_a_link_at_the_database_or_a_side_file(tmp_path, victim, side):
    db = tmp_path / "state.db"
    connect_sqlite(str(db)).close()
    os.symlink(victim, str(db) + side) if side else (db.unlink(), os.symlink(victim, db))
    with pytest.raises(UnsafeLogFileError, match=str(db) + side):
        connect_sqlite(str(db))
    assert victim.read_bytes() == b"victim"


def test_sqlite_in_a_directory_reached_through_a_link_works(tmp_path):
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "log")
    db = connect_sqlite(str(tmp_path / "log" / "state.db"), isolation_level=None)
    db.execute("CREATE TABLE t (x)")
    db.close()
    ro = connect_sqlite(str(tmp_path / "log" / "state.db"), "mode=ro")
    assert ro.execute("SELECT count(*) FROM t").fetchone() == (0,)
    ro.close()


def test_layout_names_lists_every_file_name_the_layout_declares():
    names = layout.layout_names()
    declared = {v for k, v in vars(layout).items() if k.endswith("_FILE") and isinstance(v, str)}
    assert declared <= set(names)
    assert {"state.db-wal", "spark.db-shm", "00000000000000000000.index.tmp", "marks.tmp",
            "00000000000000000000.log.deleted", ".prepared-segment-0.index.stale",
            "00000000000000000000.index.cleaned", "archive-manifest.json.tmp"} <= set(names)
    assert len(names) == len(set(names))
