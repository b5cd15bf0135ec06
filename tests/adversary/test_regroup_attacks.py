"""The disk check's regroup attacked (retention/scheduling/disk_check.py): a log directory moved to
another filesystem by no mount (a parent swapped for a link to another disk) stays in its old
filesystem's group until the next periodic look (`REGROUP_EVERY`, 5 minutes). That wait may delay
what the new disk's own pressure deletes; it must not let the old disk's force delete from the
moved log, whose disk does not force: a force deletes unexpired and unconsumed segments. Real
tmpfs mounts (root), a real scheduler's pressure pass."""

from __future__ import annotations

import os
import subprocess

import pytest

from retention import RetentionScheduler

from retention_helpers import config_text, make_log, segment_bases, write_config

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts tmpfs: needs root")


def _mount(path, size: str = "1m") -> None:
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)


def _fill_to(mount, ratio: float) -> None:
    """A ballast file bringing `mount`'s used ratio (df's) to `ratio`."""
    st = os.statvfs(mount)
    used, total = (st.f_blocks - st.f_bfree) * st.f_frsize, (st.f_blocks - st.f_bfree + st.f_bavail) * st.f_frsize
    with open(os.path.join(mount, "ballast"), "ab") as f:
        f.write(b"\0" * max(0, int(ratio * total) - used))
    st = os.statvfs(mount)
    assert abs((st.f_blocks - st.f_bfree) / (st.f_blocks - st.f_bfree + st.f_bavail) - ratio) < 0.03


def test_a_log_moved_to_a_disk_that_does_not_force_is_not_forced_by_its_old_disk(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _mount(a)
    _mount(b)
    try:
        make_log(a / "filler", 4)
        make_log(a / "x", 3)
        moved = make_log(b / "x", 3)              # the same log, on disk b
        (tmp_path / "p").symlink_to(a)
        logs = {"filler": {"path": str(a / "filler"), "segment_size": "4KiB"},
                "x": {"path": str(tmp_path / "p" / "x"), "segment_size": "4KiB"}}
        policy = {"disk": {"clean_ratio": 0.5, "force_ratio": 0.7}}     # force_target: clean_ratio
        config = write_config(tmp_path, config_text(tmp_path, logs=logs, policy=policy))[1]
        scheduler = RetentionScheduler(config, watch_rolls=False)
        try:
            (fs,) = scheduler._state.filesystems.values()
            assert fs.logs == ("filler", "x") and fs.dev == os.stat(a).st_dev
            (tmp_path / "p.new").symlink_to(b)
            os.replace(tmp_path / "p.new", tmp_path / "p")        # x is on disk b now: no mount made
            _fill_to(a, 0.9)                      # a forces
            _fill_to(b, 0.6)                      # b: above clean_ratio, below force_ratio: no force
            assert scheduler.pressure.measure(fs).forcing
            result = scheduler.passes.pressure(fs.dev)
            assert result is not None and result.deleted, "disk a's force deletes from its own logs"
            assert segment_bases(b / "x") == moved, \
                "disk a's force deleted young segments of a log on disk b, which does not force"
        finally:
            scheduler.stop()
    finally:
        for m in (a, b):
            subprocess.run(["umount", "-l", str(m)], check=False)
