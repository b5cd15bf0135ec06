"""A log opened with readonly=True by a user who may read it but not write it (the retention
sidecar under its own user), and one that user may not read at all: real files, real SQLite, the
reader a real process running as uid 65534.

Before: the read-only open failed with "corrupt log file state.db: consumer state database is
unreadable (attempt to write a readonly database)", and a directory the user may not read was
"not a commit log: no meta.json"."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys

import pytest

from commitlog import CommitLog
from other_user_helpers import NOBODY, NOBODY_NAME, call_as_nobody


def _write_log(path: str, records: int, groups: dict[str, int]) -> None:
    with CommitLog.open(path, segment_size=4096) as log:
        for i in range(records):
            log.append(b"value-%d" % i, timestamp_ms=1_000 + i)
        for group, offset in groups.items():
            log.commit(group, offset)


def _read_only_to_others(path: str) -> None:
    """Owned by root; everyone else may read and enter, nobody but root may write."""
    os.chmod(path, 0o755)
    for name in os.listdir(path):
        os.chmod(os.path.join(path, name), 0o644)


def _digest(path: str) -> str:
    digest = hashlib.sha256()
    for name in sorted(os.listdir(path)):
        digest.update(name.encode())
        with open(os.path.join(path, name), "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()


def _read_all(path: str):
    with CommitLog.open(path, readonly=True) as log:
        return (log.start_offset, log.end_offset, [r.value for r in log.scan(0, log.end_offset)][-1],
                log.committed())


def _committed(path: str):
    return CommitLog.open(path, readonly=True).committed()


def _open_readonly(path: str):
    return CommitLog.open(path, readonly=True)


def _refused_writes(path: str):
    found = []
    with CommitLog.open(path, readonly=True) as log:
        for write in (lambda: log.commit("billing", 30), lambda: log.remove_head(force=True)):
            try:
                write()
                found.append("written")
            except Exception as exc:  # noqa: BLE001 - the type and words are the point
                found.append(f"{type(exc).__name__}: {exc}")
        found.append(log.finish_removals())
    return found


# A writer that dies with its commit only in state.db-wal: a process of its own (a fresh interpreter,
# not a fork of the test process, see call_as_nobody).
_DYING_WRITER = """
import os, sys
from commitlog import CommitLog
log = CommitLog.open(sys.argv[1])
log.commit("billing", 9)
os._exit(0)
"""


def test_a_log_the_user_may_read_but_not_write_is_read_with_its_groups_closed_or_live(nobody_tmp):
    path = str(nobody_tmp / "closed")
    _write_log(path, 200, {"billing": 120, "audit": 7})
    _read_only_to_others(path)
    assert not any(n.endswith(("-wal", "-shm")) for n in os.listdir(path))   # closed cleanly
    before = _digest(path)
    got = call_as_nobody(_read_all, path)
    assert got == repr((0, 200, b"value-199", {"audit": 7, "billing": 120}))
    assert _digest(path) == before
    # While its writer runs, the latest commit is in state.db-wal: read through the writer's -shm.
    with CommitLog.open(path) as writer:
        writer.commit("billing", 150)
        _read_only_to_others(path)
        assert os.path.getsize(os.path.join(path, "state.db-wal")) > 0
        got = call_as_nobody(_committed, path)
        assert got == repr({"audit": 7, "billing": 150})


def test_writes_by_a_user_who_may_not_write_the_log_name_the_permission_not_corruption(nobody_tmp):
    path = str(nobody_tmp / "closed")
    _write_log(path, 200, {"billing": 120})
    _read_only_to_others(path)
    before = _digest(path)
    commit, remove, finished = eval(call_as_nobody(_refused_writes, path))   # noqa: S307 - our own repr
    for refused in (commit, remove):
        assert refused.startswith("LogNotWritableError: ") and "permission denied" in refused, refused
        assert f"uid {NOBODY} ({NOBODY_NAME})" in refused and "corrupt" not in refused
    assert "commit a consumer offset" in commit and "remove a segment" in remove
    assert finished == []
    assert _digest(path) == before


def test_commits_left_in_a_wal_without_its_shm_are_refused_not_read_stale(nobody_tmp):
    path = str(nobody_tmp / "crashed")
    _write_log(path, 10, {"billing": 3})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    subprocess.run([sys.executable, "-c", _DYING_WRITER, path], check=True, env=env, timeout=120)
    os.remove(os.path.join(path, "state.db-shm"))      # a copy or backup that left it out
    assert os.path.getsize(os.path.join(path, "state.db-wal")) > 0
    _read_only_to_others(path)
    with pytest.raises(AssertionError) as refused:
        call_as_nobody(_committed, path)
    assert "LogNotReadableError" in str(refused.value) and "state.db-wal" in str(refused.value)
    assert "corrupt" not in str(refused.value)


@pytest.mark.parametrize("locked", ["directory", "parent", "meta.json", "state.db"])
def test_a_log_the_user_may_not_read_is_permission_denied_naming_the_user(nobody_tmp, locked):
    parent = nobody_tmp / "private"
    path = str(parent / "log")
    _write_log(path, 20, {"billing": 5})
    _read_only_to_others(path)
    target = {"directory": path, "parent": str(parent), "meta.json": os.path.join(path, "meta.json"),
              "state.db": os.path.join(path, "state.db")}[locked]
    os.chmod(target, 0o700 if os.path.isdir(target) else 0o600)
    with pytest.raises(AssertionError) as denied:
        call_as_nobody(_open_readonly, path)
    message = str(denied.value)
    assert message.startswith("LogNotReadableError: ") and "permission denied" in message, message
    assert f"uid {NOBODY} ({NOBODY_NAME})" in message and path in message
    assert "not a commit log" not in message and "corrupt" not in message
    if locked != "parent":
        assert stat.filemode(os.stat(target).st_mode) in message   # what the operator compares
