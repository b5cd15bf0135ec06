"""Deletion over compacted logs: segments smaller than segment_size, offsets no longer dense,
segments that vanished into gaps, an interrupted swap's leftovers. The walker, the plan's reasons,
consumer protection and the audit's [base, end) spans all follow each segment's explicit end."""

from __future__ import annotations

import os
import shutil

from commitlog import CommitLog
from commitlog.layout import index_path, segment_path
from retention import Cleaner, read_audit
from retention.deletion.report import render_result

from retention_helpers import config_text, make_log, segment_bases, set_age, write_config

CONFIG = config_text()


def _compacted(tmp_path) -> tuple[str, list[int]]:
    """Bases 0, 33, ..., 198 (active). Segment 33 all dead (vanishes: a gap [33, 66)), segment 66
    with its first 20 records dead (compacted to 13 records, about 1.6 KiB, ending at 99),
    segment 99 with 11 records marked but not compacted."""
    path = str(tmp_path / "staging")
    bases = make_log(tmp_path / "staging", 6)
    assert bases == [0, 33, 66, 99, 132, 165, 198]
    with CommitLog.open(path, readonly=True) as log:
        log.mark_dead(range(33, 86))
        log.mark_dead(range(99, 110))
        outs = log.compact([[33], [66]], lambda o, k, t, m: "dead" if m else None, marks=log.marks_snapshot())
        assert [o.segment for o in outs] == [None, 66]
    set_age(tmp_path / "staging", [0, 66, 99, 132, 165], 3 * 3600)
    return path, bases


def test_a_pass_deletes_compacted_and_whole_segments_and_audits_their_own_spans(tmp_path):
    path, _ = _compacted(tmp_path)
    small = os.path.getsize(segment_path(path, 66))
    assert small < 4096
    _, config = write_config(tmp_path, CONFIG)
    cleaner = Cleaner(config)
    cleaner.trigger_manual()
    result = cleaner.run_pass()
    assert result.failed is False and result.deleted == 5
    assert segment_bases(tmp_path / "staging") == [198]
    audit = read_audit(str(tmp_path / "audit.jsonl"))
    # 0 ends at 33 (the gap after it is no record of it), the compacted 66 at 99: explicit ends.
    assert [(e["base_offset"], e["end_offset"]) for e in audit] == [(0, 33), (66, 99), (99, 132),
                                                                    (132, 165), (165, 198)]
    assert [e["bytes"] for e in audit] == [4096, small, 4096, 4096, 4096]
    assert result.freed_bytes == 4 * 4096 + small
    with CommitLog.open(path, readonly=True) as log:
        assert log.start_offset == 198
    cleaner.close()


def test_the_plan_shows_each_segments_live_share_and_the_gap_does_not_protect(tmp_path):
    path, _ = _compacted(tmp_path)
    with CommitLog.open(path, readonly=True) as log:
        log.commit("etl", 50)        # inside the gap: consumed all of segment 0, nothing of 66
    _, config = write_config(tmp_path, CONFIG)
    cleaner = Cleaner(config)
    cleaner.trigger_manual()
    files = cleaner.plan().to_json_dict()["logs"][0]["files"]
    assert [f["base_offset"] for f in files] == [0, 66, 99, 132, 165, 198]
    assert [(f["action"], f["reasons"]) for f in files][:3] == [
        ("delete", []), ("keep", ["unconsumed:etl"]), ("keep", ["unconsumed:etl", "prefix"])]
    ratios = {f["base_offset"]: f["live_ratio"] for f in files}
    assert ratios[0] == 1.0 and ratios[66] == 1.0         # 66 kept only live records (and its gap)
    assert abs(ratios[99] - 22 / 33) < 0.01               # 11 of 33 equal records marked dead
    assert files[1]["bytes"] < 4096 and files[2]["live_bytes"] == 22 * 121
    text = render_result(cleaner.plan().to_json_dict())
    header = next(line for line in text.splitlines() if "SEGMENT" in line)
    assert "LIVE" in header
    row99 = next(line for line in text.splitlines() if line.strip().startswith("00000000000000000099.log"))
    assert " 67% " in row99
    cleaner.close()


def test_a_torn_small_segment_still_stops_the_log(tmp_path):
    path, _ = _compacted(tmp_path)
    os.truncate(segment_path(path, 132), 1000)            # not a compaction output: torn
    _, config = write_config(tmp_path, CONFIG)
    cleaner = Cleaner(config)
    cleaner.trigger_manual()
    result = cleaner.run_pass()
    log_result = result.to_json_dict()["logs"][0]
    assert "is not a complete compacted segment" in log_result["error"]
    assert result.deleted == 0 and segment_bases(tmp_path / "staging") == [0, 66, 99, 132, 165, 198]
    cleaner.close()


def test_a_swap_leftover_is_no_segment_of_the_plan_and_goes_with_its_compacted_head(tmp_path):
    path = str(tmp_path / "staging")
    make_log(tmp_path / "staging", 6)
    os.makedirs(path + ".aside")
    for p in (segment_path(path, 33), index_path(segment_path(path, 33))):
        shutil.copy2(p, path + ".aside")
    with CommitLog.open(path, readonly=True) as log:
        log.mark_dead(list(range(0, 20)) + list(range(40, 66)))
        [out] = log.compact([[0, 33]], lambda o, k, t, m: "dead" if m else None, marks=log.marks_snapshot())
        assert out.segment == 0 and out.inputs == (0, 33)
    for name in os.listdir(path + ".aside"):              # a SIGKILL after the commit point
        shutil.copy2(os.path.join(path + ".aside", name), path)
    assert segment_bases(tmp_path / "staging")[:3] == [0, 33, 66]
    set_age(tmp_path / "staging", [0, 33, 66], 3 * 3600)
    _, config = write_config(tmp_path, CONFIG)
    cleaner = Cleaner(config)
    cleaner.trigger_manual()
    planned = cleaner.plan().to_json_dict()["logs"][0]["files"]
    assert [f["base_offset"] for f in planned][:2] == [0, 66]
    result = cleaner.run_pass()
    assert result.deleted == 2
    audit = read_audit(str(tmp_path / "audit.jsonl"))
    assert [(e["base_offset"], e["end_offset"]) for e in audit] == [(0, 66), (66, 99)]
    assert segment_bases(tmp_path / "staging")[0] == 99
    with CommitLog.open(path, readonly=True) as log:
        assert log.start_offset == 99
    cleaner.close()


def test_status_counts_the_short_segments_a_pass_does_not_examine_as_they_are(tmp_path):
    """A pass stats only the head it could delete; the segments between it and the active one are
    counted from their files, so compacted (short) ones are not counted as full segments."""
    from retention import RetentionScheduler
    path = str(tmp_path / "staging")
    bases = make_log(tmp_path / "staging", 6)
    with CommitLog.open(path, readonly=True) as log:
        log.mark_dead(range(99, 125))
        log.mark_dead(range(132, 160))
        log.compact([[99], [132]], lambda o, k, t, m: "dead" if m else None, marks=log.marks_snapshot())
    on_disk = sum(os.path.getsize(segment_path(path, base)) for base in segment_bases(tmp_path / "staging"))
    assert on_disk < len(bases) * 4096                      # two segments are short now
    _, config = write_config(tmp_path, config_text(policy={"files_per_pass": 1}))
    scheduler = RetentionScheduler(config)
    try:
        result = scheduler.clean()                             # young segments: nothing deleted
        assert result.deleted == 0 and result.logs[0].not_examined == 4
        log = scheduler.status()["logs"][0]
        assert (log["segments"], log["bytes"]) == (len(bases), on_disk)
        past = os.stat(path).st_mtime_ns - 5_000_000_000
        os.utime(path, ns=(past, past))                        # unchanged for seconds: counted once
        scheduler.clean()
        scheduler.clean()
        assert scheduler.status()["logs"][0]["bytes"] == on_disk
        with CommitLog.open(path, readonly=True) as other:     # a compaction changes the directory
            other.mark_dead(range(165, 190))
            other.compact([[165]], lambda o, k, t, m: "dead" if m else None, marks=other.marks_snapshot())
        smaller = sum(os.path.getsize(segment_path(path, base)) for base in segment_bases(tmp_path / "staging"))
        assert smaller < on_disk
        scheduler.clean()
        assert scheduler.status()["logs"][0]["bytes"] == smaller
    finally:
        scheduler.stop()
