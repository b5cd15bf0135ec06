"""Change-driven compaction (retention/compaction/look_memory.py): a log whose last look found nothing
to compact, and none of whose inputs changed since, is not looked at (nor opened) again; each input
changed alone gets it looked at again; the clock reaching what the look depended on does too, and
compaction then happens. Real logs, real SQLite, a real writer; only the pass's time is given (a
clock), and the racy-mtime rule is waited out."""

from __future__ import annotations

import os
import time
from pathlib import Path

from commitlog import CommitLog
from policies import parse_config
from retention import RetentionScheduler
from retention.compaction.compactor import Compactor
from retention.compaction.look_memory import CompactionMemory
from retention.deletion.watched import WatchedLog

from compaction_helpers import dead_log
from retention_helpers import make_log
from racy_window import RACY


def _config(tmp: Path, names, **compaction):
    logs = "".join(f"  {n}:\n    path: {tmp / n}\n    segment_size: 4KiB\n" for n in names)
    body = "".join(f"      {k}: {v}\n" for k, v in compaction.items()) or "      enabled: true\n"
    return parse_config(f"service:\n  audit: {tmp}/audit.jsonl\nlogs:\n{logs}policies:\n  default:\n"
                        f"    delete_at_hours: []\n    compaction:\n{body}")


def _pass(config, memory: CompactionMemory, pending: dict | None = None, at: float | None = None):
    """One compaction pass as the scheduler runs it (a new Compactor on the kept memory): (the logs
    it opened, its result)."""
    ranges = pending if pending is not None else {}
    c = Compactor(config, memory=memory, pending=lambda path: ranges.get(os.path.basename(path), []),
                  clock=(lambda: at) if at is not None else time.time)
    opened, real = set(), WatchedLog.log.fget      # a pass closes each log when done with it: seen opening

    def log(w: WatchedLog):
        if w._log is None:
            opened.add(w.name)
        return real(w)
    WatchedLog.log = property(log)
    try:
        result = c.run()
        return opened, result
    finally:
        WatchedLog.log = property(real)
        c.close()


def _settle(config, memory: CompactionMemory, pending: dict | None = None, at: float | None = None) -> None:
    """Passes until no log is looked at: a first look claims each log (its lock file), a change of
    the directory, and its files are racily new."""
    for _ in range(4):
        time.sleep(RACY)
        if not _pass(config, memory, pending, at)[0]:
            return
    raise AssertionError("the logs are looked at every pass")


def test_an_untouched_log_is_not_looked_at_again_and_each_input_changed_alone_gets_it_looked_at(tmp_path):
    names = ["untouched", "directory", "state", "marks", "tombstones", "tail", "pending"]
    for n in names:
        make_log(tmp_path / n, 2)
    writers = {n: CommitLog.open(tmp_path / n, flush="none") for n in ("state", "marks", "tombstones", "tail")}
    try:
        writers["state"].commit("etl", 1)
        writers["marks"].mark_dead([0])          # one record of a segment: far from max_live_ratio
        writers["tombstones"].note_tombstones({2: time.time()})        # its file exists from here on
        config = _config(tmp_path, names, keys="true")
        memory, pending = CompactionMemory(), {"pending": [(0, 5)]}
        _settle(config, memory, pending)
        skipped = memory.skipped
        opened, result = _pass(config, memory, pending)
        assert opened == set() and memory.skipped == skipped + len(names)       # none opened, none read
        assert [(e.name, e.planned, e.outputs, e.error) for e in result.logs] == [(n, 0, [], None) for n in names]
        dirs = {n: os.stat(tmp_path / n).st_mtime_ns for n in names}
        (tmp_path / "directory" / "notes.txt").write_text("a file created in the log directory")
        writers["state"].commit("etl", 2)                                # state.db, in place
        writers["marks"].mark_dead([1])                                  # marks, in place
        writers["tombstones"].note_tombstones({3: time.time()})          # tombstones, in place
        writers["tail"].append(b"one more record", key=b"k")             # through the mapping
        pending["pending"] = [(0, 6)]                                    # a protector's answer
        for n in ("state", "marks", "tombstones", "tail", "pending"):
            assert os.stat(tmp_path / n).st_mtime_ns == dirs[n], f"{n}: its directory changed too"
        time.sleep(RACY)        # each change is older than the racy window: only the key tells
        assert _pass(config, memory, pending)[0] == set(names) - {"untouched"}
        assert _pass(config, memory, pending)[0] == set()
        changed = _config(tmp_path, names, keys="true", max_live_ratio=0.4)     # a reload's new settings
        assert _pass(changed, memory, pending)[0] == set(names)
    finally:
        for w in writers.values():
            w.close()


def test_a_young_segment_is_looked_at_again_when_it_comes_of_age_and_then_compacted(tmp_path):
    dead_log(tmp_path / "a", 4)                     # two records in three dead: due but for min_age
    config = _config(tmp_path, ["a"], min_age="1h")
    memory, now = CompactionMemory(), time.time()
    _settle(config, memory, at=now)
    assert _pass(config, memory, at=now + 1800)[0] == set()            # still young: not looked at
    assert _pass(config, memory, at=now - 60)[0] == {"a"}               # a clock set back: looked at
    _settle(config, memory, at=now)
    opened, result = _pass(config, memory, at=now + 3601)              # of age: looked at, compacted
    assert opened == {"a"} and result.outputs > 0


def test_a_tombstone_past_its_retention_and_a_group_gone_stale_get_the_log_looked_at_again(tmp_path):
    for n in ("tombstone", "group"):
        with CommitLog.open(tmp_path / n, segment_size=4096, flush="none") as log:
            log.append(b"x" * 90, key=b"k")
            if n == "tombstone":
                log.append(b"", key=b"gone")
            else:
                log.commit("etl", 1)
            while len(log.segments()) < 3:
                log.append(b"y" * 90, key=b"f%d" % log.end_offset)
    config = _config(tmp_path, ["tombstone", "group"], keys="true", tombstone_retention="1h")
    memory, now = CompactionMemory(), time.time()
    _settle(config, memory, at=now)                    # the first look records the tombstone seen
    assert _pass(config, memory, at=now + 1800)[0] == set()
    # The group's silence outlasts consumer_ttl (7 days by default) only later than the retention.
    assert _pass(config, memory, at=now + 3601)[0] == {"tombstone"}
    _settle(config, memory, at=now + 3601)
    assert _pass(config, memory, at=now + 8 * 86400)[0] == {"group"}    # the tombstone log: nothing left to wait for


def test_the_scheduler_s_compaction_job_skips_an_untouched_log_and_compacts_a_changed_one(tmp_path):
    make_log(tmp_path / "a", 3)
    config = _config(tmp_path, ["a"])
    scheduler = RetentionScheduler(config, watch_rolls=False)
    try:
        for _ in range(4):
            time.sleep(RACY)
            scheduler.compactions.job("default")
        memory = next(iter(scheduler.compactions._memory.values()))
        skipped = memory.skipped
        scheduler.compactions.job("default")
        assert memory.skipped == skipped + 1
        with CommitLog.open(tmp_path / "a", flush="none") as log:
            log.mark_dead(range(log.segments()[0].end_offset))          # the first segment all dead
        time.sleep(RACY)
        scheduler.compactions.job("default")
        assert scheduler.compactions.last["outputs"] == 1
    finally:
        scheduler.stop()
