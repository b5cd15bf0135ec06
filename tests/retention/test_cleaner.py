"""The cleaner on real logs: batch limits, pauses, audit, prefix, unconsumed, multi-pass."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from commitlog import CommitLog
from retention import Cleaner, read_audit

from retention_helpers import config_text, make_log, segment_bases, set_age, write_config

CONFIG = config_text(policy={"pause_between_files": "50ms"})


def test_deletes_exactly_the_ten_oldest_expired_segments_per_pass(tmp_path):
    bases = make_log(tmp_path / "staging", 33)        # 33 full + 1 active
    set_age(tmp_path / "staging", bases[:30], 3 * 3600)   # 30 expired
    _, config = write_config(tmp_path, CONFIG)
    cleaner = Cleaner(config)
    cleaner.trigger_manual()
    result = cleaner.run_pass()
    assert result.deleted == 10
    assert segment_bases(tmp_path / "staging") == bases[10:]
    audit = read_audit(tmp_path / "audit.jsonl")
    assert [e["base_offset"] for e in audit] == bases[:10]
    times = [datetime.fromisoformat(e["time"]).timestamp() for e in audit]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert min(gaps) >= 0.045, gaps                    # pause_between_files 50 ms (ms-rounded times)
    assert all(e["triggers"] == ["manual"] and e["bytes"] == 4096 for e in audit)

    cleaner.run_pass()
    cleaner.run_pass()
    cleaner.run_pass()
    # Three more passes: the 30 expired are gone, the young and the active stay.
    assert segment_bases(tmp_path / "staging") == bases[30:]
    with CommitLog.open(tmp_path / "staging", readonly=True) as log:
        assert log.start_offset == bases[30]
    cleaner.close()


def test_keeps_young_segments_and_explains_why(tmp_path):
    bases = make_log(tmp_path / "staging", 5)
    set_age(tmp_path / "staging", bases[:2], 3 * 3600)
    _, config = write_config(tmp_path, CONFIG)
    cleaner = Cleaner(config)
    cleaner.trigger_manual()
    result = cleaner.run_pass()
    files = result.to_json_dict()["logs"][0]["files"]
    actions = [(f["base_offset"], f["action"], f["reasons"]) for f in files]
    assert actions[0][:2] == (bases[0], "deleted")
    assert actions[1][:2] == (bases[1], "deleted")
    assert actions[2] == (bases[2], "keep", ["reserved"])
    assert actions[-1][1] == "keep" and "active" in actions[-1][2]
    cleaner.close()


def test_unconsumed_segments_are_kept_until_the_group_moves_on(tmp_path):
    bases = make_log(tmp_path / "staging", 6)
    set_age(tmp_path / "staging", bases[:6], 3 * 3600)
    with CommitLog.open(tmp_path / "staging", readonly=True) as log:
        log.commit("etl", bases[2] + 1)        # consumed the first two segments and one record
    _, config = write_config(tmp_path, CONFIG)
    cleaner = Cleaner(config)
    cleaner.trigger_manual()
    result = cleaner.run_pass()
    assert result.deleted == 2
    files = result.to_json_dict()["logs"][0]["files"]
    assert files[2]["reasons"] == ["unconsumed:etl"]
    assert "prefix" in files[3]["reasons"]
    with CommitLog.open(tmp_path / "staging", readonly=True) as log:
        log.commit("etl", bases[5])
    assert cleaner.run_pass().deleted == 3
    cleaner.close()


def test_no_trigger_means_nothing_is_deleted(tmp_path):
    bases = make_log(tmp_path / "staging", 4)
    set_age(tmp_path / "staging", bases, 3 * 3600)
    _, config = write_config(tmp_path, CONFIG)
    cleaner = Cleaner(config)
    result = cleaner.run_pass()
    assert result.deleted == 0
    assert all("no-trigger" in f["reasons"] for f in result.to_json_dict()["logs"][0]["files"])
    assert segment_bases(tmp_path / "staging") == bases
    cleaner.close()


def test_time_window_deletes_expired_during_a_listed_hour(tmp_path):
    bases = make_log(tmp_path / "staging", 4)
    at_four = (datetime.now(timezone.utc) + timedelta(days=1)).replace(hour=4, minute=30)
    set_age(tmp_path / "staging", bases[:3], 3 * 3600, now=at_four.timestamp())
    set_age(tmp_path / "staging", bases[3:], 600, now=at_four.timestamp())
    _, config = write_config(tmp_path, config_text(policy={"pause_between_files": "50ms", "delete_at_hours": [4],
                                                        "timezone": "UTC"}))
    cleaner = Cleaner(config)
    assert cleaner.plan(at_four).to_json_dict()["logs"][0]["triggers"] == ["time-window"]
    at_five = at_four.replace(hour=5)
    assert cleaner.run_pass(at_five).deleted == 0
    assert cleaner.run_pass(at_four).deleted == 3
    cleaner.close()


def test_plan_json_has_the_documented_shape(tmp_path):
    make_log(tmp_path / "staging", 2)
    _, config = write_config(tmp_path, CONFIG)
    data = Cleaner(config).plan().to_json_dict()
    json.dumps(data)
    assert set(data) == {"at", "kind", "logs"}
    log = data["logs"][0]
    assert {"name", "path", "disk", "triggers", "files", "deleted", "freed_bytes"} <= set(log)
    assert set(log["disk"]) == {"used_ratio", "total_bytes", "free_bytes"}
    assert set(log["files"][0]) == {"segment", "base_offset", "bytes", "action", "reasons", "live_bytes",
                                    "live_ratio", "details"}
    assert set(log["files"][0]["details"]) == set(log["files"][0]["reasons"])   # each reason with its figures


def test_a_log_directory_that_does_not_exist_yet_is_reported_not_an_error(tmp_path):
    _, config = write_config(tmp_path, CONFIG)
    result = Cleaner(config).run_pass()
    log = result.to_json_dict()["logs"][0]
    assert result.logs[0].error is None and result.logs[0].not_created and not result.failed
    assert log["not_created"] is True and "not a commit log yet" in log["note"] and "error" not in log
    assert result.deleted == 0


def test_a_segment_older_than_the_one_before_it_is_deleted_after_it(tmp_path):
    """Segments' mtimes need not grow with their offsets (a compaction's output, a short roll: the
    kill-and-restart soak with an archive met one). The pass ran its deletions by age alone: the
    older second segment came first, its removal was refused (not the head) and the log stopped,
    at every pass, for good."""
    log = tmp_path / "staging"
    bases = make_log(log, 4)
    set_age(log, bases[:3], 3 * 3600)
    set_age(log, bases[1:2], 4 * 3600)                 # the second is older than the first
    _, config = write_config(tmp_path, CONFIG)
    cleaner = Cleaner(config)
    try:
        cleaner.trigger_manual()
        result = cleaner.run_pass()
    finally:
        cleaner.close()
    assert segment_bases(log) == bases[3:]
    assert result.deleted == 3
    assert [e["base_offset"] for e in read_audit(tmp_path / "audit.jsonl")] == bases[:3]
