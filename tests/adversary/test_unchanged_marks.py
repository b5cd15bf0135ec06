"""Change-driven passes' dirty marks attacked (retention/deletion/changes.py, the roll watch's
inotify): another directory put at a log's path with no event on the watched one (its parent
renamed, a mount put over it and taken away), a log's path made a link to another log's
directory, and a change made while a pass reads a log's key. A log whose watch no longer sees the directory at its path must not stay clean: each
later change would wait for the full check (`FULL_CHECK`, 60 s), for ever. Real logs, real inotify
through a scheduler's roll watch, a real bind mount of a tmpfs; the racy window is waited out."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from retention.deletion import changes, log_keys
from retention.scheduling.rollwatch import RollWatch

from retention_helpers import make_log
from test_unchanged import RACY
from test_unchanged_inotify import _pass, _settle, sidecar  # noqa: F401 (sidecar: a fixture)


def _logs(root: Path, names) -> None:
    for n in names:
        make_log(root / n, 2)
        (root / n / "notes.txt").write_text("a user's file in the log directory")


def _full_check(scheduler, cleaner, monkeypatch) -> set[str]:
    """A pass at which every log's key is taken (the full check's period passed): the logs it planned."""
    monkeypatch.setattr(changes, "FULL_CHECK", RACY)
    time.sleep(RACY)
    planned, _ = _pass(scheduler, cleaner)
    monkeypatch.setattr(changes, "FULL_CHECK", 60.0)
    return planned


def _changed(scheduler, cleaner, log: Path, name: str) -> tuple[set[str], int]:
    """A file created in `log`, the racy window waited out: the next pass's (planned, keyed)."""
    (log / name).write_text(name)
    time.sleep(RACY)
    return _pass(scheduler, cleaner)


@pytest.mark.parametrize("swap", ["parent-renamed", "mounted-over"])
def test_another_directory_at_a_log_s_path_no_event_reported_is_watched_again(tmp_path, request, sidecar,
                                                                              monkeypatch, swap):
    root = tmp_path / "logs"
    _logs(root, ["a", "b"])
    scheduler, cleaner = sidecar(root, ["a", "b"])
    watch, log = scheduler.disk_check._rolls, root / "a"
    _settle(scheduler, cleaner)
    mounted = False
    try:
        if swap == "parent-renamed":      # the watches stay on the directories now under logs.old
            os.rename(root, tmp_path / "logs.old")     # its files linked into new ones: the same last segment
            shutil.copytree(tmp_path / "logs.old", root, copy_function=os.link)
        else:                             # the watch stays on the directory under the mount
            copy = Path(request.getfixturevalue("small_fs")) / "a"
            shutil.copytree(log, copy, copy_function=shutil.copy2)
            subprocess.run(["mount", "--bind", str(copy), str(log)], check=True)
            mounted = True
        time.sleep(RACY)
        assert _pass(scheduler, cleaner)[1] == 0, "no event: no key taken"
        assert "a" in _full_check(scheduler, cleaner, monkeypatch)
        planned, _ = _changed(scheduler, cleaner, log, "one")
        assert planned == {"a"}, "a change in the directory now at the path carried for the full check"
        assert str(log) in watch.unwatched(), "the watch found on another directory than the path's"
        watch.retry()                     # as the disk check does
        _settle(scheduler, cleaner)
        assert cleaner.memory.changes.is_watched(str(log))
        assert _changed(scheduler, cleaner, log, "two") == ({"a"}, 1), "the new directory's event marks it"
        if mounted:                       # the mount taken away: the directory under it shows again
            subprocess.run(["umount", "-l", str(log)], check=True)    # lazily: the sidecar holds its claim
            mounted = False
            assert _full_check(scheduler, cleaner, monkeypatch) == {"a"}
            assert str(log) in watch.unwatched()
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(log)], check=True)


def test_a_log_s_path_made_a_link_to_another_log_leaves_that_log_its_events(tmp_path, sidecar):
    """The watch added for the link is the other log's own (one watch an inode): its events were
    put down to the link, the other log stayed clean whatever changed in it."""
    _logs(tmp_path, ["a", "b"])
    scheduler, cleaner = sidecar(tmp_path, ["a", "b"])
    watch, marks = scheduler.disk_check._rolls, cleaner.memory.changes
    _settle(scheduler, cleaner)
    os.rename(tmp_path / "b", tmp_path / "b.old")
    os.symlink(tmp_path / "a", tmp_path / "b")
    time.sleep(0.2)                       # the move's event read: b unwatched
    watch.retry()
    assert marks.is_watched(str(tmp_path / "a")) and not marks.is_watched(str(tmp_path / "b"))
    _pass(scheduler, cleaner)             # b planned: another directory at its path
    planned, _ = _changed(scheduler, cleaner, tmp_path / "a", "one")
    assert "a" in planned, "a change in a carried: its event put down to b"
    os.unlink(tmp_path / "b")
    os.rename(tmp_path / "b.old", tmp_path / "b")
    watch.retry()
    assert marks.is_watched(str(tmp_path / "b")) and marks.is_watched(str(tmp_path / "a"))


@pytest.mark.parametrize("first", ["directory", "link"])
def test_a_link_watched_before_or_after_its_directory_leaves_the_directory_its_events(tmp_path, first):
    real, link = tmp_path / "a", tmp_path / "b"
    real.mkdir()
    link.symlink_to(real)
    watch = RollWatch(lambda dev: None)
    try:
        watch.sync({str(p): 0 for p in ([real, link] if first == "directory" else [link, real])})
        marks = watch.marks
        assert marks.is_watched(str(real)) and not marks.is_watched(str(link))
        assert watch.unwatched() == [str(link)], "the link's path is not watched: its target's watch is a's"
        assert not marks.fresh(str(real))          # its key taken: clean from now on
        (real / "x").write_text("x")
        for _ in range(100):                       # until the watch's thread read the event
            if not marks.fresh(str(real)):
                break
            time.sleep(0.02)
        else:
            raise AssertionError("a change in the directory left it clean")
    finally:
        watch.close()


def test_a_change_made_while_a_pass_reads_the_key_is_planned_at_the_next_pass(tmp_path, sidecar, monkeypatch):
    """A pass marks a log clean before it reads the key: the event of a change the key missed,
    read by the watch's thread during the pass, leaves it dirty (marked clean after, it was lost
    until the full check)."""
    _logs(tmp_path, ["a"])
    scheduler, cleaner = sidecar(tmp_path, ["a"])
    _settle(scheduler, cleaner)
    read = log_keys.files_key

    def read_then_changed(paths, listing, now_ns):
        key = read(paths, listing, now_ns)
        (Path(paths[0]) / "late").write_text("created just after the key was read")
        time.sleep(0.2)                   # the watch's thread reads its event
        return key

    monkeypatch.setattr(log_keys, "files_key", read_then_changed)
    assert _full_check(scheduler, cleaner, monkeypatch) == set(), "the key read before the change: carried"
    monkeypatch.setattr(log_keys, "files_key", read)
    time.sleep(RACY)
    assert _pass(scheduler, cleaner) == ({"a"}, 1), "the change made while the key was read was missed"
