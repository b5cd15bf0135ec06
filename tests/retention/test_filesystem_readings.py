"""A filesystem's reading with many logs on it: the policies and disk settings it is judged by are
each taken once, not once per log (a reading runs every second, and at every roll the watch sees),
and the thresholds it publishes are still the lowest of its logs' policies."""

from __future__ import annotations

import yaml

from retention import RetentionScheduler

from retention_helpers import config_text, make_log, write_config


def _config(tmp_path):
    logs = {name: {"path": str(tmp_path / name), "segment_size": "4KiB"} for name in ("a", "b", "c")}
    logs["c"]["overrides"] = {"files_per_pass": 3}                # a policy of its own, the same disk
    logs["d"] = {"path": str(tmp_path / "d"), "segment_size": "4KiB", "policy": "tight"}
    data = yaml.safe_load(config_text(tmp_path, logs=logs))
    data["policies"]["tight"] = {"delete_at_hours": [], "disk": {"clean_ratio": 0.5, "force_ratio": 0.6}}
    return write_config(tmp_path, yaml.safe_dump(data))[1]


def test_a_filesystem_lists_each_policy_and_disk_setting_once(tmp_path):
    for name in "abcd":
        make_log(tmp_path / name, 1)
    config = _config(tmp_path)
    scheduler = RetentionScheduler(config, watch_rolls=False)
    try:
        (fs,) = scheduler._state.filesystems.values()
        assert sorted(fs.logs) == ["a", "b", "c", "d"]
        in_force = config.policies_in_force
        assert fs.policies() == (in_force["a"], in_force["c"], in_force["d"])    # a and b share theirs
        assert in_force["c"].files_per_pass == 3
        assert fs.disks() == (in_force["a"].disk, in_force["d"].disk)          # c's disk equals a's
        scheduler.pressure.check(fs.dev)
        registry = scheduler.metrics.registry
        value = lambda name: registry.get_sample_value(f"retention_disk_{name}", {"mountpoint": fs.mountpoint})
        assert value("clean_ratio") == 0.5 and value("force_ratio") == 0.6
        assert value("refuse_writes_ratio") == in_force["a"].disk.refuse_writes_ratio
    finally:
        scheduler.stop()
