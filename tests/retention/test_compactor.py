"""The compaction runner on real logs: bytes back, liveness by marks, keys, tombstones against time and
group progress, min_age, throttle, budget, dry run and the audit line of every output."""

from __future__ import annotations

import os
import time
from datetime import timedelta

from commitlog import CommitLog
from commitlog.record import LENGTH_SIZE
from retention import read_events
from retention.compaction.compactor import Compactor

from compaction_helpers import (SEGMENT, compaction_config, dead_log, digest_tree, dir_bytes,
                                planned_is_what_is_written, scan_pairs)
from retention_helpers import write_config


class FakeTime:
    """A monotonic clock that only the (fake) sleep advances; records each sleep."""

    def __init__(self) -> None:
        self.now, self.sleeps = 0.0, []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_a_marked_dead_log_gives_bytes_back_and_scans_exactly_its_live_records(tmp_path):
    live = dead_log(tmp_path / "a", 4)
    _, config = compaction_config(tmp_path, tmp_path / "a")
    before = dir_bytes(tmp_path / "a")
    c = Compactor(config)
    result = c.run()
    c.close()
    entry = result.logs[0]
    assert entry.error is None and entry.outputs
    assert result.reclaimed_bytes > 0
    assert dir_bytes(tmp_path / "a") == before - result.reclaimed_bytes
    assert scan_pairs(tmp_path / "a") == live
    assert sum(o.dropped["dead"] for o in entry.outputs) == 4 * 33 - sum(1 for o, _ in live if o < 4 * 33)
    # A second pass finds nothing left to do.
    c = Compactor(config)
    assert c.run().outputs == 0
    c.close()


def _keyed_log(path):
    """Keys k0..k29 written twice, then a tombstone of k5, then unique filler keys so every
    superseded record and the tombstone lie in sealed segments. Returns the tombstone's offset."""
    with CommitLog.open(path, segment_size=SEGMENT, flush="none") as log:
        for _ in range(2):
            for k in range(30):
                log.append(b"x" * 90, key=b"k%d" % k)
        tomb = log.append(b"", key=b"k5")
        f = 0
        while log.segments()[-1].base_offset <= tomb:
            log.append(b"y" * 90, key=b"f%d" % f)
            f += 1
        return tomb


def _newest_per_key(path):
    with CommitLog.open(path, readonly=True) as log:
        records = list(log.scan())
    newest = {}
    for r in records:
        newest[r.key] = r.offset
    return records, newest


def test_keyed_log_drops_superseded_records_and_keeps_a_fresh_tombstone(tmp_path):
    log_dir = tmp_path / "a"
    tomb = _keyed_log(log_dir)
    _, config = compaction_config(tmp_path, log_dir, keys="true", max_live_ratio=1.0, tombstone_retention="1h")
    records, newest = _newest_per_key(log_dir)
    c = Compactor(config)
    result = c.run()
    c.close()
    dropped = sum(o.dropped["superseded"] for o in result.logs[0].outputs)
    assert dropped == len(records) - len(newest) == 31      # 30 first versions, and k5's second
    after, _ = _newest_per_key(log_dir)
    assert [r.offset for r in after] == sorted(newest.values())
    with CommitLog.open(log_dir, readonly=True) as log:
        assert log.read(tomb).value == b""
        seen = log.tombstones_first_seen()
    assert abs(seen[tomb] - time.time()) < 60


def _kill_fillers(log_dir, tomb):
    """Mark the filler records beside the tombstone dead, so its segment is worth rewriting."""
    with CommitLog.open(log_dir, readonly=True) as log:
        log.mark_dead(range(tomb + 1, log.segments()[-1].base_offset))


def _tombstones_dropped(config, at):
    c = Compactor(config, clock=lambda: at)
    try:
        return sum(o.dropped["tombstone"] for o in c.run(dry_run=True).logs[0].outputs)
    finally:
        c.close()


def test_a_tombstone_goes_after_its_retention_once_every_live_group_committed_past_it(tmp_path):
    log_dir = tmp_path / "a"
    tomb = _keyed_log(log_dir)
    _, config = compaction_config(tmp_path, log_dir, keys="true", max_live_ratio=1.0, tombstone_retention="1h")
    with CommitLog.open(log_dir, readonly=True) as log:
        log.commit("etl", tomb)                 # at the tombstone: not consumed yet
    Compactor(config).run()                     # first seen now
    _kill_fillers(log_dir, tomb)
    now, later = time.time(), time.time() + 2 * 3600
    assert _tombstones_dropped(config, now + 1800) == 0      # within its retention
    assert _tombstones_dropped(config, later) == 0           # etl has not consumed it
    with CommitLog.open(log_dir, readonly=True) as log:
        log.commit("etl", tomb + 1)
    assert _tombstones_dropped(config, now + 1800) == 0      # consumed, but within its retention
    assert _tombstones_dropped(config, later) == 1
    c = Compactor(config, clock=lambda: later)
    gone = c.run()
    c.close()
    assert sum(o.dropped["tombstone"] for o in gone.logs[0].outputs) == 1
    assert tomb not in [o for o, _ in scan_pairs(log_dir)]


def test_a_stale_group_does_not_keep_a_tombstone(tmp_path):
    log_dir = tmp_path / "a"
    tomb = _keyed_log(log_dir)
    _, config = compaction_config(tmp_path, log_dir, keys="true", max_live_ratio=1.0, tombstone_retention="1h")
    with CommitLog.open(log_dir, readonly=True) as log:
        log.commit("etl", 0)                    # never consumed the tombstone
    Compactor(config).run()
    _kill_fillers(log_dir, tomb)
    # A day on, etl (consumer_ttl 7d by default) still protects it; eight days on, it is stale.
    assert _tombstones_dropped(config, time.time() + 86400) == 0
    assert _tombstones_dropped(config, time.time() + 8 * 86400) == 1


def test_min_age_leaves_young_segments_alone_until_they_are_old_enough(tmp_path):
    live = dead_log(tmp_path / "a", 3)
    _, config = compaction_config(tmp_path, tmp_path / "a", min_age="1h")
    c = Compactor(config)
    young = c.run()
    c.close()
    assert young.logs[0].planned == 0 and young.reclaimed_bytes == 0
    later = time.time() + 2 * 3600
    c = Compactor(config, clock=lambda: later)
    old = c.run()
    c.close()
    assert old.logs[0].outputs and old.reclaimed_bytes > 0
    assert scan_pairs(tmp_path / "a") == live


def test_the_throttle_asks_for_the_wait_that_keeps_bytes_read_and_written_at_the_rate(tmp_path):
    dead_log(tmp_path / "a", 4)
    _, config = compaction_config(tmp_path, tmp_path / "a", max_bytes_per_second="1KiB", merge="false")
    fake = FakeTime()
    c = Compactor(config, sleep=fake.sleep, monotonic=fake.monotonic)
    result = c.run()
    c.close()
    outputs = result.logs[0].outputs
    assert len(outputs) == 4 and fake.sleeps
    written = sum(o.bytes_after for o in outputs)
    # Time passes only in the throttle's sleeps, so they add up to (read + written) / rate.
    assert written + 4 * (33 * 121) <= fake.now * 1024 <= sum(o.bytes_before + o.bytes_after + 4 for o in outputs)


def test_the_time_budget_ends_a_pass_between_two_outputs(tmp_path):
    live = dead_log(tmp_path / "a", 4)
    _, config = compaction_config(tmp_path, tmp_path / "a", max_bytes_per_second="1KiB", merge="false",
                                  max_pass_duration="1s")
    fake = FakeTime()
    c = Compactor(config, sleep=fake.sleep, monotonic=fake.monotonic)
    result = c.run()
    c.close()
    entry = result.logs[0]
    assert result.interrupted and len(entry.outputs) == 1 and entry.planned == 4
    assert scan_pairs(tmp_path / "a") == live


def test_a_dry_run_changes_no_byte_and_counts_what_the_real_pass_drops(tmp_path):
    live = dead_log(tmp_path / "a", 4)
    _, config = compaction_config(tmp_path, tmp_path / "a")
    before = digest_tree(tmp_path)
    c = Compactor(config)
    dry = c.run(dry_run=True)
    c.close()
    assert digest_tree(tmp_path) == before
    assert dry.dry_run and dry.logs[0].outputs
    c = Compactor(config)
    real = c.run()
    c.close()
    assert [(o.inputs, o.dropped, o.bytes_before) for o in dry.logs[0].outputs] == \
        [(o.inputs, o.dropped, o.bytes_before) for o in real.logs[0].outputs]
    # The plan's bytes_after (live bytes and what each marked run costs) is what the output holds
    # but its end marker.
    for d, r in zip(dry.logs[0].outputs, real.logs[0].outputs):
        assert d.bytes_after == r.bytes_after - LENGTH_SIZE
    assert scan_pairs(tmp_path / "a") == live


def test_every_output_has_an_intent_and_a_compacted_line_with_its_figures(tmp_path):
    dead_log(tmp_path / "a", 4)
    _, config = compaction_config(tmp_path, tmp_path / "a")
    c = Compactor(config)
    result = c.run()
    c.close()
    events = read_events(str(tmp_path / "audit.jsonl"))
    intents = [e for e in events if e["event"] == "intent"]
    done = [e for e in events if e["event"] == "compacted"]
    outputs = result.logs[0].outputs
    assert len(intents) == len(done) == len(outputs) >= 1
    for intent, line, out in zip(intents, done, outputs):
        assert intent["action"] == "compact" and intent["id"] == line["id"]
        assert line["log"] == "a" and line["path"] == str(tmp_path / "a" / line["segment"])
        assert line["inputs"] == [f"{b:020d}.log" for b in out.inputs]
        assert (line["first_offset"], line["end_offset"]) == (out.inputs[0], out.end_offset)
        assert line["bytes_before"] == out.bytes_before == len(out.inputs) * SEGMENT
        assert line["bytes_after"] == out.bytes_after
        assert line["dropped"] == {"dead": out.dropped["dead"], "superseded": 0, "tombstone": 0}
        assert "recovered" not in line


def test_a_fully_dead_run_disappears_and_its_offsets_become_a_gap(tmp_path):
    with CommitLog.open(tmp_path / "a", segment_size=SEGMENT, flush="none") as log:
        while len(log.segments()) < 4:
            log.append(b"z" * 100)
        first_two = log.segments()[2].base_offset
        log.mark_dead(range(first_two))
        live = [(r.offset, r.value) for r in log.scan()]
    _, config = compaction_config(tmp_path, tmp_path / "a")
    c = Compactor(config)
    result = c.run()
    c.close()
    (out,) = result.logs[0].outputs
    assert out.segment is None and out.bytes_after == 0 and out.dropped["dead"] == first_two
    assert scan_pairs(tmp_path / "a") == live
    assert timedelta(0) <= timedelta(seconds=result.duration)


def test_records_a_pending_spark_job_may_still_make_visible_are_kept_even_when_marked(tmp_path):
    dead_log(tmp_path / "a", 4)
    _, config = compaction_config(tmp_path, tmp_path / "a")
    asked = []

    def pending(path):
        asked.append(path)
        return [(10, 40)]

    c = Compactor(config, pending=pending)
    result = c.run()
    c.close()
    assert asked == [str(tmp_path / "a")]
    kept = [o for o, _ in scan_pairs(tmp_path / "a")]
    # Marked but pending: still there (the store's marks still hide them from readers).
    with CommitLog.open(tmp_path / "a", readonly=True) as log:
        held = [o for o, *_ in log.record_facts(log.marks_snapshot(), 10, 40)]
    assert held == list(range(10, 40))
    assert all(o % 3 == 0 for o in kept)
    # The two segments holding a marked record the range keeps are not rewritten while it is
    # pending (a rewrite would apply its mark for good); the other two drop their 22 dead each.
    assert sum(o.dropped["dead"] for o in result.logs[0].outputs) == 2 * 22
    c = Compactor(config, pending=lambda path: [])    # the job finished: every dead record goes
    result = c.run()
    c.close()
    assert sum(o.dropped["dead"] for o in result.logs[0].outputs) == 2 * 22
    with CommitLog.open(tmp_path / "a", readonly=True) as log:
        assert all(o % 3 == 0 for o, *_ in log.record_facts(log.marks_snapshot()))


def test_a_pending_hook_that_fails_compacts_nothing_in_that_log_and_says_why(tmp_path):
    live = dead_log(tmp_path / "a", 2)
    _, config = compaction_config(tmp_path, tmp_path / "a")
    before = digest_tree(tmp_path / "a")

    def broken(path):
        raise RuntimeError("spark.db is locked")

    c = Compactor(config, pending=broken)
    result = c.run()
    c.close()
    assert result.failed and "spark.db is locked" in result.logs[0].error and result.outputs == 0
    assert digest_tree(tmp_path / "a") == before and scan_pairs(tmp_path / "a") == live


def test_by_default_the_spark_ledgers_unfinished_attempts_are_pending_and_kept(tmp_path):
    from commitlog.spark.ledger.ledger import Ledger   # the ledger alone: no pyspark
    dead_log(tmp_path / "a", 4)
    with Ledger(str(tmp_path / "a")) as ledger:  # a task attempt still writing from offset 40
        ledger.open_job("job-1", "batch", None)
        ledger.register_writer("w-1", "job-1", 40, None)
    _, config = compaction_config(tmp_path, tmp_path / "a")
    c = Compactor(config)
    result = c.run()
    c.close()
    assert not result.failed and result.outputs >= 1
    with CommitLog.open(tmp_path / "a", readonly=True) as log:
        held = [o for o, *_ in log.record_facts(log.marks_snapshot())]
        sealed_end = log.segments()[-1].base_offset
    # Below the segment holding 40 only the live records remain; from there on every record,
    # marked or not, is kept (a segment with a marked record the range keeps waits for its end).
    assert [o for o in held if o < 33] == [o for o in range(33) if o % 3 == 0]
    assert [o for o in held if 33 <= o < 40] == list(range(33, 40))
    assert [o for o in held if o >= 40] == list(range(40, held[-1] + 1))
    assert sealed_end > 40


def test_a_keyed_policy_on_a_spark_staging_log_compacts_nothing_and_says_why(tmp_path):
    from commitlog.spark.ledger.ledger import Ledger
    live = dead_log(tmp_path / "a", 2)
    Ledger(str(tmp_path / "a")).close()
    _, config = compaction_config(tmp_path, tmp_path / "a", keys="true")
    before = digest_tree(tmp_path / "a")
    c = Compactor(config)
    result = c.run()
    c.close()
    assert result.failed and "Spark staging log" in result.logs[0].error and result.outputs == 0
    assert digest_tree(tmp_path / "a") == before and scan_pairs(tmp_path / "a") == live


def test_a_run_of_small_delete_markers_beside_live_records_is_dropped(tmp_path):
    """100 keys deleted in a row: their markers (25 bytes each, one run) share a sealed segment
    with 16 live records. Dropping them costs the 8-byte offset delta of the record after them (a
    gap record where a run ends the segment), not a gap record per marker, and the plan counts it
    so: the markers go (they were kept forever while the plan estimated a gap record per dropped
    record from the segment's mean record size)."""
    log_dir = tmp_path / "a"
    with CommitLog.open(log_dir, segment_size=SEGMENT, flush="none") as log:
        for k in range(100):
            log.append(b"v" * 40, key=b"k%03d" % k)
        segments = len(log.segments())
        while len(log.segments()) == segments:                     # to a fresh segment
            log.append(b"f" * 40, key=b"f%d" % log.end_offset)
        live = [log.append(b"l" * 40, key=b"live%02d" % i) for i in range(16)]
        markers = [log.append(b"", key=b"k%03d" % k) for k in range(100)]
        log.append(b"x" * 3000, key=b"big")                        # seals the markers' segment
        holder = log.segments()[-2]
        assert holder.base_offset <= live[0] and markers[-1] < holder.end_offset
    _, config = compaction_config(tmp_path, log_dir, keys="true", tombstone_retention="1s", min_age="0s",
                                  max_live_ratio=0.9)
    start = time.time()
    outputs = 0
    for run in range(3):                                            # first seen, then past retention
        outputs += planned_is_what_is_written(config, start + 10 * run)
    assert outputs >= 2
    kept = dict(scan_pairs(log_dir))
    assert [o for o in markers if o in kept] == []                  # every marker went
    assert all(kept[o] == b"l" * 40 for o in live)                  # the live records stayed, at their offsets


def test_an_unkeyed_logs_plan_counts_what_each_marked_run_costs(tmp_path):
    dead_log(tmp_path / "a", 4, keep_every=3)                  # runs of two marked records between live ones
    _, config = compaction_config(tmp_path, tmp_path / "a", max_live_ratio=0.9)
    assert planned_is_what_is_written(config, time.time()) >= 1


def test_a_pass_over_many_logs_keeps_none_of_them_open_once_done_with_it(tmp_path):
    """Each log is closed when its part of the pass ends (a pass over 10,000 logs held every one
    open, with its descriptors and memory, until the compactor closed)."""
    logs = "".join(f"  l{i}:\n    path: {tmp_path / f'l{i}'}\n    segment_size: 4KiB\n" for i in range(12))
    for i in range(12):
        dead_log(tmp_path / f"l{i}", 2)
    _, config = write_config(tmp_path, f"service:\n  audit: {tmp_path / 'audit.jsonl'}\nlogs:\n{logs}"
                                    "policies:\n  default:\n    interval: 1h\n    delete_at_hours: []\n")
    fds = lambda: len(os.listdir("/proc/self/fd"))   # noqa: E731
    before = fds()
    c = Compactor(config)
    result = c.run()
    try:
        assert result.outputs >= 12 and all(entry.error is None for entry in result.logs)
        assert fds() <= before, os.listdir("/proc/self/fd")
    finally:
        c.close()
