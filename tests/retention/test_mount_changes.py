"""A mount or unmount under the logs is acted on at the next disk check: a log directory that is
on another filesystem since is grouped with that filesystem's logs (its own pressure, its own
passes) within a second or two, not at the next periodic look (`REGROUP_EVERY`, 5 minutes: every
log's `stat`, the idle sidecar's largest cost at 10,000 logs). Real tmpfs mounts (root)."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from retention import RetentionScheduler
from retention.scheduling import disk_check
from retention.scheduling.disk_check import MOUNT_DIRTY_GAP, MOUNT_GAP, REGROUP_EVERY
from retention.scheduling.filesystems import MountTable, dev_of

from retention_helpers import config_text, make_log, write_config
from racy_window import RACY

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs: needs root")


def _mount(path) -> None:
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(path)], check=True)


def _umount(path) -> None:
    subprocess.run(["umount", "-l", str(path)], check=False)


def test_the_mount_table_tells_each_mount_and_unmount_once(tmp_path):
    table = MountTable()
    try:
        assert not table.changed()                 # changes since it was made: none yet
        assert not table.changed()
        _mount(tmp_path)
        try:
            assert table.changed() and not table.changed()
        finally:
            _umount(tmp_path)
        assert table.changed() and not table.changed()
    finally:
        table.close()
    assert not table.changed()                     # closed: the scheduler stopped


def test_a_file_that_cannot_be_polled_means_always_look(tmp_path):
    table = MountTable(str(tmp_path / "no-such-file"))
    assert table.changed() and table.changed()


def test_a_log_directory_is_the_stat_of_its_nearest_ancestor_that_can_be_read(tmp_path):
    assert dev_of(str(tmp_path / "not" / "yet")) == os.stat(tmp_path).st_dev
    (tmp_path / "file").write_bytes(b"")
    assert dev_of(str(tmp_path / "file" / "below")) == os.stat(tmp_path).st_dev
    os.symlink("loop", tmp_path / "loop")                          # ELOOP, not a traceback
    assert dev_of(str(tmp_path / "loop" / "log")) == os.stat(tmp_path).st_dev


def _groups(scheduler) -> list[tuple[str, ...]]:
    return sorted(fs.logs for fs in scheduler._state.filesystems.values())


def _await_groups(scheduler, expected, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while _groups(scheduler) != expected:
        assert time.monotonic() < deadline, f"{_groups(scheduler)} after {seconds} s, not {expected}"
        time.sleep(0.1)


def test_a_log_directory_mounted_over_is_regrouped_at_the_next_disk_check(tmp_path):
    assert REGROUP_EVERY >= 30       # what the mount table saves: a regroup here can only be its doing
    make_log(tmp_path / "a", 1)
    (tmp_path / "mnt").mkdir()
    logs = {"a": {"path": str(tmp_path / "a"), "segment_size": "4KiB"},
            "b": {"path": str(tmp_path / "mnt" / "b"), "segment_size": "4KiB"}}   # b: not created yet
    config = write_config(tmp_path, config_text(tmp_path, logs=logs))[1]
    scheduler = RetentionScheduler(config, watch_rolls=False)
    scheduler.start()
    try:
        assert _groups(scheduler) == [("a", "b")]
        time.sleep(1.5)                            # past the first disk checks
        _mount(tmp_path / "mnt")
        try:
            # A look at most a MOUNT_GAP away: another process's mount (a parallel test's) may have made the last.
            _await_groups(scheduler, [("a",), ("b",)], seconds=MOUNT_GAP + 5)
            (b_fs,) = [fs for fs in scheduler._state.filesystems.values() if fs.logs == ("b",)]
            assert b_fs.dev == os.stat(tmp_path / "mnt").st_dev != os.stat(tmp_path).st_dev
        finally:
            _umount(tmp_path / "mnt")
        _await_groups(scheduler, [("a", "b")], seconds=MOUNT_GAP + 5)   # one look a MOUNT_GAP
    finally:
        scheduler.stop()


def test_a_log_path_that_cannot_be_read_holds_no_other_log_in_its_old_group(tmp_path):
    """One log's parent swapped for a link loop (or a dead NFS mount, or a directory the sidecar
    may not search) once kept every log from being regrouped."""
    make_log(tmp_path / "a", 1)
    (tmp_path / "mnt").mkdir()
    (tmp_path / "p").mkdir()
    make_log(tmp_path / "p" / "c", 1)
    logs = {"a": {"path": str(tmp_path / "a"), "segment_size": "4KiB"},
            "b": {"path": str(tmp_path / "mnt" / "b"), "segment_size": "4KiB"},
            "c": {"path": str(tmp_path / "p" / "c"), "segment_size": "4KiB"}}
    config = write_config(tmp_path, config_text(tmp_path, logs=logs))[1]
    scheduler = RetentionScheduler(config, watch_rolls=False)
    scheduler.start()
    try:
        assert _groups(scheduler) == [("a", "b", "c")]
        os.rename(tmp_path / "p", tmp_path / "p-gone")
        os.symlink("p", tmp_path / "p")                            # p -> p: ELOOP below it
        _mount(tmp_path / "mnt")
        try:
            _await_groups(scheduler, [("a", "c"), ("b",)])
        finally:
            _umount(tmp_path / "mnt")
    finally:
        scheduler.stop()


def test_a_look_a_mount_made_has_the_next_pass_key_every_watched_log_again(tmp_path, monkeypatch):
    """A mount over a log directory raises no event on it: after a mount change the logs are
    keyed again at the next pass, not at the next full check a minute later. The gaps are
    shortened (what they bound is the test below's): the look and its dirtying come within seconds."""
    monkeypatch.setattr(disk_check, "MOUNT_GAP", 1.0)
    monkeypatch.setattr(disk_check, "MOUNT_DIRTY_GAP", 3.0)
    for name in "ab":
        make_log(tmp_path / name, 1)
    (tmp_path / "mnt").mkdir()
    logs = {name: {"path": str(tmp_path / name), "segment_size": "4KiB"} for name in "ab"}
    config = write_config(tmp_path, config_text(tmp_path, logs=logs, policy={"interval": "1h"}))[1]
    scheduler = RetentionScheduler(config, watch_rolls=True)
    scheduler.start()
    try:
        (fs,) = scheduler._state.filesystems.values()
        memory = fs.cleaner.memory

        def keyed_by_a_pass() -> int:
            before = memory.keyed
            scheduler.passes.interval("default")
            return memory.keyed - before

        deadline = time.monotonic() + 20
        while keyed_by_a_pass() != 0:              # watched, then clean: a pass keys neither
            assert time.monotonic() < deadline, "the logs are keyed at every pass"
            time.sleep(RACY)
        # Another process's mount (a parallel test's) in the last MOUNT_DIRTY_GAP makes this one's
        # dirtying owed until the gap has passed: awaited, then the next pass keys both.
        dirtied = scheduler.disk_check._mount_dirtied
        _mount(tmp_path / "mnt")                    # beside the logs, over neither
        try:
            deadline = time.monotonic() + disk_check.MOUNT_DIRTY_GAP + 10
            while scheduler.disk_check._mount_dirtied == dirtied:
                assert time.monotonic() < deadline, "the mount's look did not mark the logs dirty"
                time.sleep(0.1)
            assert keyed_by_a_pass() == 2
        finally:
            _umount(tmp_path / "mnt")
    finally:
        scheduler.stop()


def test_mounts_changing_all_the_time_mark_the_logs_dirty_once_a_minute_at_most(tmp_path):
    """A host whose containers mount and unmount all the time: each look a mount change makes
    (once a MOUNT_GAP) is not a key of every log at the next pass; that is once a MOUNT_DIRTY_GAP,
    and a look within the gap of the last dirtying is owed, done when the gap has passed (never dropped).
    The disk check's looks are made here at chosen monotonic times (no job runs)."""
    for name in "ab":
        make_log(tmp_path / name, 1)
    for name in ("m1", "m2", "m3"):
        (tmp_path / name).mkdir()
    logs = {name: {"path": str(tmp_path / name), "segment_size": "4KiB"} for name in "ab"}
    config = write_config(tmp_path, config_text(tmp_path, logs=logs))[1]
    scheduler = RetentionScheduler(config, watch_rolls=True)
    check = scheduler.disk_check
    check.watch()
    mounted = []
    try:
        marks = check._rolls.marks
        paths = [str(tmp_path / name) for name in "ab"]
        assert all(marks.is_watched(p) for p in paths)

        def dirty() -> list[bool]:          # and clean again, as a pass about to key them leaves them
            return [not marks.fresh(p) for p in paths]

        dirty()
        t0 = time.monotonic()
        for at, mount, expected in ((t0, "m1", [True, True]),                    # the first look: dirty
                                    (t0 + MOUNT_GAP + 1, "m2", [False, False]),   # looked, not dirtied yet
                                    (t0 + MOUNT_DIRTY_GAP + 1, None, [True, True]),  # m2's, owed: done now
                                    (t0 + MOUNT_DIRTY_GAP + 2, None, [False, False]),   # nothing owed
                                    (t0 + 2 * MOUNT_DIRTY_GAP + 2, "m3", [True, True])):
            if mount is not None:
                _mount(tmp_path / mount)
                mounted.append(tmp_path / mount)
            check._look_for_moves(at)
            assert dirty() == expected, (mount, at - t0)
    finally:
        for path in mounted:
            _umount(path)
        check.close()
        scheduler.stop()


def test_mounts_changing_every_second_for_minutes_dirty_the_logs_once_a_gap_and_the_last_look_too(tmp_path):
    """Mounts changing at every disk check (a second) for five minutes, then none: the logs are
    marked dirty at most once a MOUNT_DIRTY_GAP, and the dirtying the last look owes (after the
    last change) is done when its gap has passed, not dropped. A mount table whose file cannot be
    polled tells a change at every look (a real one, as on such a host); chosen monotonic times."""
    for name in "ab":
        make_log(tmp_path / name, 1)
    logs = {name: {"path": str(tmp_path / name), "segment_size": "4KiB"} for name in "ab"}
    config = write_config(tmp_path, config_text(tmp_path, logs=logs))[1]
    scheduler = RetentionScheduler(config, watch_rolls=True)
    check = scheduler.disk_check
    check.watch()
    try:
        marks = check._rolls.marks
        paths = [str(tmp_path / name) for name in "ab"]
        [marks.fresh(p) for p in paths]                  # clean, as a pass about to key them leaves them
        check._mounts.close()
        check._mounts = MountTable(str(tmp_path / "no-such-file"))    # a change at every look
        t0, dirtied, last_change = time.monotonic(), [], None
        for second in range(600):
            if second == 300:                             # the mounts stop changing
                check._mounts.close()
                last_change = second - 1
            check._look_for_moves(t0 + second)
            fresh = [marks.fresh(p) for p in paths]       # dirty, and clean again
            if not any(fresh):
                dirtied.append(second)
            assert all(fresh) or not any(fresh), (second, fresh)     # both or neither
        gaps = [b - a for a, b in zip(dirtied, dirtied[1:])]
        assert dirtied[0] == 0 and min(gaps) >= MOUNT_DIRTY_GAP, dirtied
        assert max(gaps) <= MOUNT_DIRTY_GAP + 1, f"a dirtying dropped: {dirtied}"
        assert dirtied[-1] > last_change + MOUNT_GAP, f"the last change's looks owe a dirtying: {dirtied}"
        assert dirtied[-1] <= last_change + 2 * MOUNT_GAP + MOUNT_DIRTY_GAP + 1, dirtied
    finally:
        check.close()
        scheduler.stop()


def test_a_log_directory_moved_by_no_mount_is_regrouped_within_the_periodic_look_a_slice_at_each_check(
        tmp_path, monkeypatch):
    """No mount: a parent swapped for a link to another disk. Each log's directory is looked at once
    a REGROUP_EVERY, a slice of the logs at each disk check rather than every log at once."""
    monkeypatch.setattr(disk_check, "REGROUP_EVERY", 4.0)
    a, b = tmp_path / "a", tmp_path / "b"
    for disk in (a, b):
        disk.mkdir()
        _mount(disk)
    try:
        names = [f"l{i}" for i in range(12)]
        for name in names:
            make_log(a / name, 1)
            make_log(b / name, 1)
        (tmp_path / "p").symlink_to(a)
        logs = {name: {"path": str(tmp_path / "p" / name), "segment_size": "4KiB"} for name in names}
        scheduler = RetentionScheduler(write_config(tmp_path, config_text(tmp_path, logs=logs))[1],
                                       watch_rolls=False)
        stats = []
        monkeypatch.setattr(disk_check, "dev_of", lambda path: stats.append(path) or dev_of(path))
        try:
            assert _groups(scheduler) == [tuple(names)] and scheduler._state.log_devs["l0"] == os.stat(a).st_dev
            (tmp_path / "p.new").symlink_to(b)
            os.replace(tmp_path / "p.new", tmp_path / "p")            # every log on disk b now: no mount
            moved, by_check = time.monotonic(), []
            while scheduler._state.log_devs["l0"] != os.stat(b).st_dev:
                assert time.monotonic() - moved < disk_check.REGROUP_EVERY + 1.5, "not regrouped in the period"
                before = len(stats)
                scheduler.disk_check.run()
                by_check.append(len(stats) - before)
                time.sleep(0.25)
            assert max(by_check) <= 2, f"a slice at each check, not every log: {by_check}"
        finally:
            scheduler.stop()
    finally:
        for disk in (a, b):
            _umount(disk)
