"""Consumer state read without a connection per log: committed offsets are reread only when
`state.db` or its `-wal` changed. The hostile path: another process commits, and the answer must
never be stale once that commit returned, also when the files looked old (cache trusted)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

from commitlog import CommitLog

_COMMITTER = textwrap.dedent("""
    import sys
    from commitlog import CommitLog
    log = CommitLog.open(sys.argv[1], readonly=True)
    for line in sys.stdin:
        group, offset = line.split()
        log.commit(group, int(offset))
        print("done", flush=True)
    log.close()
""")


def _age(path: str) -> None:
    """Make state.db and its -wal look an hour old, so a read of them is cached (not racy)."""
    old = time.time() - 3600
    for name in ("state.db", "state.db-wal"):
        p = os.path.join(path, name)
        if os.path.exists(p):
            os.utime(p, (old, old))


def test_a_commit_in_another_process_is_seen_at_once_though_the_answer_was_cached(tmp_log_dir):
    with CommitLog.open(tmp_log_dir, segment_size=4096, flush="none") as w:
        w.append_batch([b"x" * 50] * 40)
    child = subprocess.Popen([sys.executable, "-c", _COMMITTER, tmp_log_dir], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        with CommitLog.open(tmp_log_dir, readonly=True) as log:
            state = log._state
            for i in range(30):
                # Same group, offsets of the same width: the rows keep their size, as a
                # consumer committing in place would.
                offset = 10 + i
                _age(tmp_log_dir)
                before = log.committed()
                assert state._groups is not None, "an old, unchanged state.db is read once"
                assert log.committed() == before
                child.stdin.write(f"etl {offset}\n")
                child.stdin.flush()
                assert child.stdout.readline() == "done\n"
                assert log.committed() == {"etl": offset}, f"stale after commit {i}"
                assert log.commit_times()["etl"] > time.time() - 60
            _age(tmp_log_dir)
            log.committed()
            assert log.committed() == {"etl": 39}
            assert state._db is None, "a log whose state did not change holds no connection"
    finally:
        child.stdin.close()
        child.wait(30)
    assert child.returncode == 0


def test_a_commit_in_this_process_is_seen_at_once_and_keeps_its_connection(tmp_log_dir):
    with CommitLog.open(tmp_log_dir, segment_size=4096, flush="none") as log:
        log.append_batch([b"x"] * 2)
        _age(tmp_log_dir)
        assert log.committed() == {}
        for offset in (0, 1, 0, 1):
            log.commit("etl", offset)
            assert log.committed() == {"etl": offset}
        assert log._state._db is not None  # a log whose state changes keeps one


def test_a_group_deleted_by_another_process_disappears(tmp_log_dir):
    with CommitLog.open(tmp_log_dir, segment_size=4096, flush="none") as w:
        w.append(b"x")
        w.commit("a", 0)
        w.commit("b", 0)
    with CommitLog.open(tmp_log_dir, readonly=True) as log:
        _age(tmp_log_dir)
        assert set(log.committed()) == {"a", "b"}
        code = (f"from commitlog import CommitLog\n"
                f"with CommitLog.open({tmp_log_dir!r}, readonly=True) as l: l._state.delete_group('a')")
        subprocess.run([sys.executable, "-c", code], check=True,
                       env={**os.environ, "PYTHONPATH": os.getcwd()})
        assert set(log.committed()) == {"b"}


def test_an_idle_log_is_read_once_though_connections_come_and_go(tmp_log_dir, monkeypatch):
    """Our own connection creates an empty -wal and closing it deletes it: not a change."""
    with CommitLog.open(tmp_log_dir, segment_size=4096, flush="none") as w:
        w.append(b"x")
        w.commit("etl", 1)
    with CommitLog.open(tmp_log_dir, readonly=True) as log:
        _age(tmp_log_dir)
        state = log._state
        queries = []
        real = state._query
        monkeypatch.setattr(state, "_query", lambda *a, **k: queries.append(a) or real(*a, **k))
        for _ in range(5):
            assert log.committed() == {"etl": 1}
        assert len(queries) == 1
        assert state._db is None


def test_opening_a_log_connects_to_its_state_database_once(tmp_log_dir, monkeypatch):
    """The open reads the start offset (state.db's row beside start.offset) on the connection
    that checked the database, not on a second one; what it reads is the same."""
    import commitlog.state as state_module

    with CommitLog.open(tmp_log_dir, segment_size=4096, flush="none") as w:
        w.append_batch([b"x" * 50] * 200)
        w.commit("etl", 7)
        w.remove_head()
        start, end = w.start_offset, w.end_offset
    assert start > 0
    connects = []
    real = state_module.connect_sqlite
    monkeypatch.setattr(state_module, "connect_sqlite", lambda *a, **k: connects.append(a) or real(*a, **k))
    for readonly in (True, False):
        connects.clear()
        with CommitLog.open(tmp_log_dir, readonly=readonly) as log:
            assert len(connects) == 1
            assert (log.start_offset, log.end_offset, log.committed()) == (start, end, {"etl": 7})
        assert len(connects) == 1
