"""commitlog.safeopen: opening a log directory's files never follows a symbolic link, and
commitlog.layout.layout_names lists every name of the layout table."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys

import pytest

from commitlog import UnsafeLogFileError, layout
from commitlog.safeopen import connect_sqlite, no_follow, open_file, open_read, temporary


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


# A FIFO planted where a file of the layout is would block an open until someone came to its other
# end: each call runs in a subprocess with a timeout, so a regression fails instead of hanging.

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__import__("commitlog").__file__)))


def _in_subprocess(code: str, *args: str, module: bool = False) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "commitlog.tool", *args] if module else [sys.executable, "-c", code, *args]
    env = {**os.environ, "PYTHONPATH": _REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(command, capture_output=True, text=True, timeout=20, env=env)


def test_a_fifo_is_refused_unopened_for_reading_writing_and_creating(tmp_path):
    os.mkfifo(tmp_path / "marks")
    run = _in_subprocess("""
import os, sys
from commitlog import UnsafeLogFileError
from commitlog.safeopen import no_follow, open_file
for flags in (os.O_RDONLY, os.O_WRONLY, os.O_RDWR | os.O_CREAT, os.O_WRONLY | os.O_TRUNC):
    try:
        open_file(sys.argv[1], flags)
    except UnsafeLogFileError as exc:
        assert "FIFO" in str(exc) and exc.path == sys.argv[1], exc
    else:
        raise AssertionError(flags)
try:
    open(sys.argv[1], "rb", opener=no_follow)
except UnsafeLogFileError:
    print("refused")
""", str(tmp_path / "marks"))
    assert run.returncode == 0 and run.stdout == "refused\n", run.stderr


def test_a_directory_is_refused_and_a_regular_file_is_opened_blocking(tmp_path):
    with pytest.raises(UnsafeLogFileError, match="a directory"):
        open_file(str(tmp_path), os.O_RDONLY)
    fd = open_file(str(tmp_path / "marks"), os.O_RDWR | os.O_CREAT)
    try:
        assert not fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK
        os.write(fd, b"written")
    finally:
        os.close(fd)
    assert (tmp_path / "marks").read_bytes() == b"written"


def test_a_fifo_as_a_logs_lock_is_refused_by_the_lock_and_the_tool(tmp_path):
    from commitlog import CommitLog
    log = tmp_path / "log"
    with CommitLog.open(log) as opened:
        opened.append(b"v")
        opened.commit("g", 1)
    os.unlink(log / ".lock")
    os.mkfifo(log / ".lock")
    run = _in_subprocess("""
import sys
from commitlog import UnsafeLogFileError
from commitlog.locks import hold_writer_lock, writer_holder
for call in (hold_writer_lock, writer_holder):
    try:
        call(sys.argv[1])
    except UnsafeLogFileError:
        print("refused")
""", str(log))
    assert run.returncode == 0 and run.stdout == "refused\n" * 2, run.stderr
    for args in (("groups", log, "--reset", "g", "--to", "0"), ("groups", log, "--delete", "g"), ("verify", log)):
        run = _in_subprocess("", *map(str, args), module=True)
        assert run.returncode != 0 and "FIFO" in run.stderr, (args, run.stdout, run.stderr)


def test_open_read_gives_the_files_own_fstat_and_refuses_what_open_file_refuses(tmp_path, victim):
    fd, st = open_read(str(victim))
    try:
        assert (st.st_ino, st.st_size) == (os.stat(victim).st_ino, 6) and os.read(fd, 6) == b"victim"
    finally:
        os.close(fd)
    os.symlink(victim, tmp_path / "link")
    os.mkfifo(tmp_path / "fifo")            # refused at once: never blocks the open waiting for a writer
    (tmp_path / "dir").mkdir()
    for planted, kind in (("link", "symbolic link"), ("fifo", "FIFO"), ("dir", "directory")):
        with pytest.raises(UnsafeLogFileError, match=kind):
            open_read(str(tmp_path / planted))
    with pytest.raises(FileNotFoundError):
        open_read(str(tmp_path / "missing"))
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(5):
        with pytest.raises(UnsafeLogFileError):
            open_read(str(tmp_path / "fifo"))
    assert len(os.listdir("/proc/self/fd")) == before        # no descriptor left open on a refusal
