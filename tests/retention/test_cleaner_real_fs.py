"""The cleaner against real pressure, real holders and real crashes."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from commitlog import CommitLog, disk_usage
from retention import Cleaner, read_audit

from retention_helpers import config_text, make_log, segment_bases, set_age, write_config

def pressure_config(tmp_path, log_dir, *, force_target: float | None = 0.80) -> str:
    """Disk pressure decides alone (nothing is an hour old); 256 KiB segments on a small disk."""
    disk = {"clean_ratio": 0.70, "force_ratio": 0.80, "refuse_writes_ratio": 0.95}
    if force_target is not None:
        disk["force_target"] = force_target
    return config_text(tmp_path, log={"path": str(log_dir), "segment_size": "256KiB"},
                       policy={"files_per_pass": 200, "disk": disk})


@pytest.mark.parametrize("small_fs", [("tmpfs", 16 << 20)], indirect=True)
def test_deletes_oldest_first_regardless_of_age_when_disk_forces(tmp_path, small_fs):
    fs = Path(small_fs)
    log_dir = fs / "staging"
    with CommitLog.open(log_dir, segment_size=256 * 1024, flush="none", refuse_writes_ratio=None) as log:
        while disk_usage(str(fs)).used_ratio < 0.88:
            log.append_batch([os.urandom(1000) for _ in range(64)])
        end = log.end_offset
        log.commit("etl", end // 2)      # etl consumed half; the rest is unconsumed
        log.commit("audit-job", end // 4)
    bases = segment_bases(log_dir)
    before = disk_usage(str(fs)).used_ratio
    assert before > 0.85
    config_path, _ = write_config(tmp_path, pressure_config(tmp_path, log_dir))
    result = subprocess.run([sys.executable, "-m", "retention.cli", "clean", "--config", str(config_path), "--json"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    after = disk_usage(str(fs)).used_ratio
    assert after < 0.80, (before, after)
    remaining = segment_bases(log_dir)
    deleted = bases[: len(bases) - len(remaining)]
    assert remaining == bases[len(deleted):]              # oldest first, no hole
    assert deleted, "nothing deleted"
    # Stopped once at force_target (0.80 here): one segment fewer would still have been above it.
    seg_ratio = 256 * 1024 / (disk_usage(str(fs)).used_bytes + disk_usage(str(fs)).free_bytes)
    assert after + seg_ratio >= 0.80 - 0.02
    audit = read_audit(tmp_path / "audit.jsonl")
    assert [e["base_offset"] for e in audit] == deleted
    assert all("disk-force" in e["triggers"] for e in audit)
    lost_by_group = {}
    for e in audit:
        for u in e["unconsumed"]:
            lost_by_group.setdefault(u["group"], []).append((u["first_offset"], u["end_offset"]))
    # Every deleted offset at or above a group's committed offset is named for that group.
    for group, committed in (("etl", end // 2), ("audit-job", end // 4)):
        expected = [(max(b, committed), nxt) for b, nxt in zip(deleted, bases[1:]) if nxt > committed]
        assert lost_by_group.get(group, []) == expected


@pytest.mark.parametrize("small_fs", [("tmpfs", 16 << 20)], indirect=True)
@pytest.mark.parametrize("force_target", [None, 0.75])
def test_a_forced_pass_deletes_down_to_force_target(tmp_path, small_fs, force_target):
    fs = Path(small_fs)
    log_dir = fs / "staging"
    with CommitLog.open(log_dir, segment_size=256 * 1024, flush="none", refuse_writes_ratio=None) as log:
        while disk_usage(str(fs)).used_ratio < 0.88:
            log.append_batch([os.urandom(1000) for _ in range(64)])
    before = disk_usage(str(fs)).used_ratio
    config_path, _ = write_config(tmp_path, pressure_config(tmp_path, log_dir, force_target=force_target))
    result = subprocess.run([sys.executable, "-m", "retention.cli", "clean", "--config", str(config_path), "--json"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    usage = disk_usage(str(fs))
    target = 0.70 if force_target is None else force_target      # unset: clean_ratio
    seg_ratio = 256 * 1024 / (usage.used_bytes + usage.free_bytes)
    # Down to the low-water mark, well below force_ratio, and not one segment further (the plan
    # counts each segment's index file too: without them a tenth segment went when nine were
    # enough). The removal's own small files (start.offset, the state's WAL) may add or give
    # back a few blocks after the plan, so "at the mark" allows 32 KiB of them either way.
    metadata = 32 * 1024 / (usage.used_bytes + usage.free_bytes)
    assert before > 0.85 and usage.used_ratio <= target + metadata, (before, usage.used_ratio)
    deleted = sum(entry["deleted"] for entry in json.loads(result.stdout)["logs"])
    assert usage.used_ratio + seg_ratio > target - metadata, (usage.used_ratio, target, before, deleted)
    assert all("disk-force" in e["triggers"] for e in read_audit(tmp_path / "audit.jsonl"))


HOLDER = textwrap.dedent("""
    import sys, time
    from commitlog import CommitLog
    log = CommitLog.open(sys.argv[1], readonly=True)
    it = log.scan()
    next(it)                      # now inside the oldest segment: held (shared flock + mapping)
    print("holding", flush=True)
    time.sleep(600)
""")

def hung_config(log_dir) -> str:
    return config_text(log={"path": str(log_dir), "segment_size": "256KiB"},
                       policy={"hung": {"force_after": "120s", "retry_every": "30s"}})


@pytest.mark.parametrize("small_fs", [("tmpfs", 16 << 20)], indirect=True)
def test_held_segment_becomes_hung_then_forced_and_its_bytes_return_when_the_holder_exits(tmp_path, small_fs):
    fs = Path(small_fs)
    log_dir = fs / "staging"
    bases = make_log(log_dir, 4, segment_size=256 * 1024, record=b"x" * 4000)
    set_age(log_dir, bases, 3 * 3600)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(log_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        _, config = write_config(tmp_path, hung_config(log_dir))
        clock = [time.time()]
        cleaner = Cleaner(config, clock=lambda: clock[0])
        cleaner.trigger_manual()
        from datetime import datetime, timezone

        def at():
            return datetime.fromtimestamp(clock[0], timezone.utc)

        first = cleaner.run_pass(at())
        files = first.to_json_dict()["logs"][0]["files"]
        assert files[0]["action"] == "hung" and files[0]["reasons"] == ["held"]
        assert first.deleted == 0                                   # nothing after the hung one
        assert segment_bases(log_dir) == bases

        cleaner.close()                                             # a restart of the cleaner:
        cleaner = Cleaner(config, clock=lambda: clock[0])           # hung state comes back from disk
        assert cleaner.logs["staging"].hung.snapshot()[bases[0]].first_attempt_at == clock[0]
        cleaner.trigger_manual()
        clock[0] += 60                                              # retry due, still held
        second = cleaner.run_pass(at())
        assert second.to_json_dict()["logs"][0]["files"][0]["action"] == "hung"

        clock[0] += 10                                              # retry not due yet
        waiting = cleaner.plan(at()).to_json_dict()["logs"][0]["files"]
        assert waiting[0]["reasons"] == ["held"] and "prefix" in waiting[1]["reasons"]

        clock[0] += 60                                              # 130 s since first attempt
        free_before = disk_usage(str(fs)).free_bytes
        forced = cleaner.run_pass(at())
        assert forced.deleted == len(bases) - 1
        entry = read_audit(tmp_path / "audit.jsonl")[0]
        assert entry["base_offset"] == bases[0] and entry["forced"] is True
        assert [h["pid"] for h in entry["pinned_by"]] == [holder.pid]
        pins = forced.logs[0].pinned
        assert [(p.pid, p.path) for p in pins] == [(holder.pid, str(log_dir / f"{bases[0]:020d}.log"))]
        freed_while_pinned = disk_usage(str(fs)).free_bytes - free_before
    finally:
        holder.kill()
        holder.wait()
    time.sleep(0.1)
    freed_after_exit = disk_usage(str(fs)).free_bytes - free_before
    # The pinned segment's bytes come back only once its holder is gone.
    assert freed_after_exit - freed_while_pinned >= 256 * 1024
    assert cleaner.plan(at()).logs[0].pinned == []
    cleaner.close()


CRASH_CHILD = textwrap.dedent("""
    import sys
    from policies import load_config
    from retention import Cleaner
    cleaner = Cleaner(load_config(sys.argv[1]))
    print("ready", flush=True)
    while True:
        cleaner.trigger_manual()
        cleaner.run_pass()
""")

CRASH_CONFIG = config_text(policy={"files_per_pass": 7, "pause_between_files": "2ms"})


def test_cleaner_killed_while_deleting_leaves_a_consistent_log(tmp_path):
    bases = make_log(tmp_path / "staging", 160)
    expired, young = bases[:150], bases[150:]
    set_age(tmp_path / "staging", expired, 3 * 3600)
    config_path, config = write_config(tmp_path, CRASH_CONFIG)
    rng = random.Random(7)
    kills = 0
    while kills < 24:
        child = subprocess.Popen([sys.executable, "-c", CRASH_CHILD, str(config_path)], cwd=tmp_path,
                                 stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.06))
        child.send_signal(signal.SIGKILL)
        child.wait()
        kills += 1
        remaining = segment_bases(tmp_path / "staging")
        assert set(young) <= set(remaining), "a segment the plan did not choose was deleted"
        assert remaining == bases[len(bases) - len(remaining):], "a hole in the log"
        # The next pass (no trigger: it deletes nothing) finishes what the kill interrupted.
        Cleaner(config).run_pass()
        leftovers = [p.name for p in (tmp_path / "staging").iterdir() if p.name.endswith(".deleted")]
        assert leftovers == []
        with CommitLog.open(tmp_path / "staging", readonly=True) as log:
            assert log.start_offset == segment_bases(tmp_path / "staging")[0]
            first = log.start_offset
            assert [r.offset for r in log.scan()][:1] == [first]
        if not set(expired) & set(segment_bases(tmp_path / "staging")):
            break
    assert kills >= 20, f"only {kills} kills before every expired segment was gone"
    audit_bases = [e["base_offset"] for e in read_audit(tmp_path / "audit.jsonl")]
    assert set(audit_bases) <= set(expired)
