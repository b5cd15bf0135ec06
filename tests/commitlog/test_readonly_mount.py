"""A log on a read-only mount (a snapshot, a backup): a reader reads it, consumer groups included;
a writer, a commit or a removal gets one `LogNotWritableError` naming the log, and nothing changes.

Before: a read-only open raised `CorruptLogError: ... consumer state database is unreadable`, and
a writer a raw `OSError` from the writer lock, outside the error tree."""

from __future__ import annotations

import hashlib
import os
import subprocess

import pytest

from commitlog import (CommitLog, CommitLogError, LogNotWritableError, NotALogError,
                       ReadOnlyLogError)


def _remount(mountpoint: str, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", mountpoint], check=True, capture_output=True)


def _tree_digest(root: str) -> str:
    digest = hashlib.sha256()
    for folder, _dirs, files in sorted(os.walk(root)):
        for name in sorted(files):
            path = os.path.join(folder, name)
            digest.update(path.encode())
            with open(path, "rb") as f:
                digest.update(f.read())
    return digest.hexdigest()


def _write_log(path: str, records: int, *, groups: dict[str, int]) -> None:
    with CommitLog.open(path, segment_size=4096) as log:
        for i in range(records):
            log.append(b"value-%d" % i, key=b"k%d" % (i % 5), timestamp_ms=1_000 + i)
        for group, offset in groups.items():
            log.commit(group, offset)


@pytest.mark.parametrize("small_fs", [("tmpfs", 8 << 20), ("ext4", 16 << 20)], indirect=True)
def test_a_reader_reads_a_log_and_its_consumer_groups_on_a_read_only_mount(small_fs):
    path = os.path.join(small_fs, "snapshot")
    _write_log(path, 400, groups={"billing": 120, "audit": 7})
    _remount(small_fs, "ro")
    before = _tree_digest(small_fs)
    with CommitLog.open(path, readonly=True) as log:
        assert log.start_offset == 0 and log.end_offset == 400
        assert [r.value for r in log.scan(0, 400)] == [b"value-%d" % i for i in range(400)]
        assert log.read(399).key == b"k4"
        assert log.committed() == {"billing": 120, "audit": 7}
        assert len(log.segments()) > 3
    assert _tree_digest(small_fs) == before


def test_a_log_copied_without_its_state_database_reads_with_no_groups(small_fs):
    path = os.path.join(small_fs, "snapshot")
    _write_log(path, 50, groups={})
    state = [n for n in os.listdir(path) if n.startswith("state.db")]
    for name in state:
        os.remove(os.path.join(path, name))
    _remount(small_fs, "ro")
    with CommitLog.open(path, readonly=True) as log:
        assert log.end_offset == 50
        assert log.committed() == {}


def test_writes_on_a_read_only_mount_raise_one_error_of_the_tree_and_change_nothing(small_fs):
    path = os.path.join(small_fs, "snapshot")
    _write_log(path, 400, groups={"billing": 120})
    _remount(small_fs, "ro")
    before = _tree_digest(small_fs)

    with pytest.raises(LogNotWritableError) as opened:
        CommitLog.open(path)
    assert isinstance(opened.value, ReadOnlyLogError) and isinstance(opened.value, CommitLogError)
    assert path in str(opened.value) and "read-only" in str(opened.value)
    assert "\n" not in str(opened.value)

    with CommitLog.open(path, readonly=True) as log:
        for attempt in (lambda: log.commit("billing", 200),
                        lambda: log.commit("newcomer", 1),
                        lambda: log.remove_head(force=True),
                        lambda: log.mark_dead([1, 2]),
                        lambda: log.compact([[log.segments()[0].base_offset]], lambda record: True),
                        lambda: log.note_tombstones({5: 1.0})):
            with pytest.raises(LogNotWritableError, match="read-only"):
                attempt()
        assert log.committed() == {"billing": 120}
        assert log.finish_removals() == []
    assert _tree_digest(small_fs) == before


def test_a_read_only_open_of_a_directory_without_a_log_on_a_read_only_mount_is_not_a_log(small_fs):
    os.mkdir(os.path.join(small_fs, "empty"))
    _remount(small_fs, "ro")
    with pytest.raises(NotALogError):
        CommitLog.open(os.path.join(small_fs, "empty"), readonly=True)


def test_a_remount_read_write_makes_the_log_writable_again(small_fs):
    path = os.path.join(small_fs, "snapshot")
    _write_log(path, 10, groups={"billing": 3})
    _remount(small_fs, "ro")
    with pytest.raises(LogNotWritableError):
        CommitLog.open(path)
    _remount(small_fs, "rw")
    with CommitLog.open(path) as log:
        log.append(b"after")
        log.commit("billing", 11)
        assert log.end_offset == 11 and log.committed() == {"billing": 11}


def test_a_reader_opened_on_a_read_only_mount_commits_again_once_it_is_remounted_read_write(small_fs):
    path = os.path.join(small_fs, "snapshot")
    _write_log(path, 400, groups={"billing": 120})
    _remount(small_fs, "ro")
    with CommitLog.open(path, readonly=True) as log:
        with pytest.raises(LogNotWritableError):
            log.commit("billing", 130)
        _remount(small_fs, "rw")
        log.commit("billing", 130)
        assert log.committed() == {"billing": 130}
        assert log.remove_head(force=True).status == "removed"
    with CommitLog.open(path, readonly=True) as again:
        assert again.committed() == {"billing": 130}
