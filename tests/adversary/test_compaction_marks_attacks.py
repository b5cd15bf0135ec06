"""The compaction job's dirty marks attacked (retention/compaction/look_memory.py with the clean
marks of `Reader.COMPACTION` in retention/deletion/changes.py). A directory's clean mark is one per
path, a look's memory one per log name: a mark made clean by taking another log's key at that
path (a reload swapped two logs' paths, and the other's job ran) must not let a log's older look
stand over a change made after it. Real logs, real SQLite, real inotify through a scheduler's roll
watch; the racy-mtime rule is waited out."""

from __future__ import annotations

import time
from pathlib import Path

from commitlog import CommitLog
from policies import parse_config
from retention import RetentionScheduler

from retention_helpers import make_log
from test_unchanged_compaction import RACY


def _config(tmp: Path, paths: dict[str, str]):
    """Log `orders` of policy `default` (compaction as by default) and `audit` of policy `lazy`
    (a segment is compacted a day after its last record: its looks find nothing), at `paths`."""
    policy = {"orders": "default", "audit": "lazy"}
    logs = "".join(f"  {n}:\n    path: {tmp / p}\n    segment_size: 4KiB\n    policy: {policy[n]}\n"
                   for n, p in paths.items())
    return parse_config(f"service:\n  audit: {tmp}/audit.jsonl\nlogs:\n{logs}policies:\n"
                        "  default:\n    delete_at_hours: []\n    compaction:\n      enabled: true\n"
                        "  lazy:\n    delete_at_hours: []\n    compaction:\n      min_age: 1d\n")


def _looked(scheduler: RetentionScheduler, policy: str) -> int:
    """One `compact:POLICY` job: how many logs it looked at."""
    memory = next(iter(scheduler.compactions._memory.values()), None)
    before = memory.looked if memory is not None else 0
    scheduler.compactions.job(policy)
    return next(iter(scheduler.compactions._memory.values())).looked - before


def _settle(scheduler: RetentionScheduler, *policies: str) -> None:
    """Jobs of `policies` until none looks at a log (a first look claims and opens each log)."""
    for _ in range(6):
        time.sleep(RACY)
        if sum(_looked(scheduler, p) for p in policies) == 0:
            return
    raise AssertionError("logs are looked at every compaction job")


def _reload(scheduler: RetentionScheduler, config) -> None:
    scheduler.reload(config)
    scheduler.disk_check.watch()        # as a started scheduler's reload does


def test_a_path_swapped_back_is_not_clean_for_a_log_by_another_log_s_key(tmp_path):
    make_log(tmp_path / "a", 2)
    make_log(tmp_path / "b", 2)
    scheduler = RetentionScheduler(_config(tmp_path, {"orders": "a", "audit": "b"}), watch_rolls=True)
    try:
        scheduler.disk_check.watch()
        _settle(scheduler, "default", "lazy")                  # orders' look at a: nothing to compact
        with CommitLog.open(tmp_path / "a", flush="none") as writer:
            writer.mark_dead(range(writer.segments()[0].end_offset))     # its first segment all dead
        time.sleep(RACY)
        _reload(scheduler, _config(tmp_path, {"orders": "b", "audit": "a"}))     # the paths swapped
        _settle(scheduler, "lazy")          # audit's looks at a take its key: a is clean again
        _reload(scheduler, _config(tmp_path, {"orders": "a", "audit": "b"}))     # and swapped back
        assert _looked(scheduler, "default") == 1, "orders' directory changed since its last look"
        assert scheduler.compactions.last["outputs"] == 1, "the dead segment compacted"
    finally:
        scheduler.stop()
