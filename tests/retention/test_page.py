"""The status page's data: runs of segments for 100,000-segment logs, bounded JSON, the audit tail,
the disk history ring."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from policies import DiskSnapshot, GroupSnapshot, LogSnapshot, SegmentDecision, SegmentSnapshot, plan
from policies.config import PolicyConfig
from retention import RetentionScheduler
from retention.deletion.cleaner import LogPassResult, PassResult
from retention.scheduling.history import StatusHistory
from retention.web.page import MAX_RUNS, TOTAL_RUNS, build_page_data, segment_runs, tail_audit

from retention_helpers import write_config

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)
N = 100_000
PER = 33          # records per segment


def big_plan(name: str = "big", *, segments: int = N, used_ratio: float = 0.8):
    """The real planner over `segments` segments: the older 60 % expired, a group that consumed 80 %."""
    t = NOW.timestamp()
    snaps = tuple(SegmentSnapshot(base_offset=i * PER, end_offset=(i + 1) * PER, path=f"/logs/{name}/{i * PER:020d}.log",
                                  size_bytes=4096, mtime=t - (300_000 if i < segments * 6 // 10 else 60),
                                  active=i == segments - 1)
                  for i in range(segments))
    total = 10**9
    disk = DiskSnapshot(filesystem_id=1, total_bytes=total, used_bytes=int(total * used_ratio),
                        free_bytes=total - int(total * used_ratio))
    log = LogSnapshot(name=name, path=f"/logs/{name}", policy="default", segments=snaps,
                      groups=(GroupSnapshot("etl", segments * 8 // 10 * PER, t),), disk=disk)
    policy = PolicyConfig.model_validate({"timezone": "UTC", "delete_at_hours": [], "files_per_pass": 10})
    return plan([log], {name: policy}, NOW).logs[0]


def test_100000_segments_become_a_handful_of_runs_that_cover_every_segment():
    log_plan = big_plan()
    runs = segment_runs(log_plan.decisions)
    assert sum(r["count"] for r in runs) == N
    assert sum(r["bytes"] for r in runs) == N * 4096
    # Oldest first, contiguous: each run starts at the segment after the previous one's last.
    for a, b in zip(runs, runs[1:]):
        assert b["first_offset"] == a["last_offset"] + PER
    # disk-clean: 10 expired go (files_per_pass), the 11th is the batch limit, the other expired ones
    # wait behind it, then the young, the young etl has not consumed, and the active segment.
    assert [(r["kind"], r["count"], r["reasons"]) for r in runs] == [
        ("delete", 10, []),
        ("batch-limit", 1, ["batch-limit"]),
        ("prefix", 59_989, ["prefix", "batch-limit"]),
        ("reserved", 20_000, ["reserved", "prefix", "batch-limit"]),
        ("reserved", 19_999, ["reserved", "unconsumed:etl", "prefix", "batch-limit"]),
        ("active", 1, ["active", "reserved", "unconsumed:etl", "prefix", "batch-limit"]),
    ]


def test_alternating_segments_are_merged_into_at_most_max_runs_mixed_bars():
    decisions = [SegmentDecision(base_offset=i, end_offset=i + 1, path=f"/l/{i:020d}.log", bytes=10,
                                 action="keep", reasons=("reserved",) if i % 2 else ("held",), log="l")
                 for i in range(N)]
    runs = segment_runs(decisions, max_runs=200)
    assert len(runs) <= 200
    assert sum(r["count"] for r in runs) == N
    assert {r["kind"] for r in runs} == {"mixed"}
    assert sum(r["mix"]["hung"] for r in runs) == N // 2
    assert sum(r["mix"]["reserved"] for r in runs) == N // 2


def test_page_json_stays_bounded_for_100000_segments_and_for_many_logs(tmp_path):
    names = [f"log{i}" for i in range(300)]
    body = "service:\n  audit: {a}\nlogs:\n".format(a=tmp_path / "audit.jsonl") + "".join(
        f"  {n}:\n    path: {tmp_path / n}\n" for n in names)
    _, config = write_config(tmp_path, body)
    scheduler = RetentionScheduler(config)
    status = scheduler.status_report()   # real, not started: no log exists yet
    disks = config.policies_in_force
    history = StatusHistory()
    for i in range(100_000):             # a day of one-second disk checks: the ring keeps one hour
        history.disk(status.filesystems[0].mountpoint, 0.5 + (i % 7) / 100, 1_000_000.0 + i)
    one_big = PassResult(NOW, [LogPassResult("log0", str(tmp_path / "log0"), big_plan("log0"))], executed=False)
    data = build_page_data(status, one_big, disks, history, [], 1_100_000.0).to_json()
    size = len(json.dumps(data, separators=(",", ":")))
    assert data["logs"][0]["segments"] == N
    assert len(data["filesystems"][0]["history"]) == 360
    assert size < 128 << 10, size
    # Worst case: every log has 2,000 segments alternating between two kinds.
    alternating = []
    for n in names:
        decisions = tuple(SegmentDecision(base_offset=i, end_offset=i + 1, path=f"/l/{i:020d}.log", bytes=10,
                                          action="keep", reasons=("reserved",) if i % 2 else ("held",), log=n)
                          for i in range(2000))
        lp = big_plan(n, segments=3)
        alternating.append(LogPassResult(n, str(tmp_path / n), type(lp)(n, lp.path, "default", lp.disk, (), decisions)))
    data = build_page_data(status, PassResult(NOW, alternating, executed=False), disks, history, [], 1_100_000.0).to_json()
    assert len(data["logs"]) + data["logs_not_shown"] == 300 and data["logs_not_shown"] == 100
    assert sum(len(log["runs"]) for log in data["logs"]) <= TOTAL_RUNS
    assert all(len(log["runs"]) <= MAX_RUNS for log in data["logs"])
    size = len(json.dumps(data, separators=(",", ":")))
    assert size < 1 << 20, size


def test_tail_audit_reads_the_end_only_newest_first_and_skips_a_torn_line(tmp_path):
    path = tmp_path / "audit.jsonl"
    with open(path, "w") as f:
        for i in range(50_000):
            f.write(json.dumps({"time": f"t{i}", "log": "a", "segment": f"{i:020d}.log", "bytes": i}) + "\n")
        f.write("not json at all\n")
        f.write('{"time": "t-torn", "log": "a", "seg')          # a writer mid-append
    entries = tail_audit(str(path), limit=5, max_bytes=4096)
    assert [e["bytes"] for e in entries] == [49_999, 49_998, 49_997, 49_996, 49_995]
    # Fewer complete lines in the window than asked for: what is there, never a partial first line.
    few = tail_audit(str(path), limit=1000, max_bytes=400)
    assert few and all(isinstance(e["bytes"], int) for e in few) and len(few) < 10
    assert tail_audit(str(tmp_path / "missing.jsonl")) == []
    path.write_bytes(b"\x00\xff garbage\n")
    assert tail_audit(str(path)) == []


def test_tail_audit_shows_deletions_not_intents_or_aborted_removals(tmp_path):
    path = tmp_path / "audit.jsonl"
    lines = [{"event": "intent", "id": "1", "segment": "a"}, {"event": "deleted", "id": "1", "segment": "a", "bytes": 1},
             {"event": "intent", "id": "2", "segment": "b"}, {"event": "aborted", "id": "2", "segment": "b"},
             {"segment": "old-format", "bytes": 2}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert [e["segment"] for e in tail_audit(str(path))] == ["old-format", "a"]


def test_history_keeps_one_hour_one_point_per_step_with_the_highest_reading():
    h = StatusHistory(step=10, points=360)
    h.disk("/data", 0.50, 1000.0)
    h.disk("/data", 0.91, 1003.0)        # a spike inside the step is what the chart must show
    h.disk("/data", 0.60, 1009.9)
    h.disk("/data", 0.70, 1010.0)
    assert h.disk_series("/data", 1011.0) == [[1000.0, 0.91], [1010.0, 0.7]]
    for i in range(10_000):
        h.disk("/data", 0.5, 2000.0 + i * 10)
    series = h.disk_series("/data", 2000.0 + 9_999 * 10)
    assert len(series) == 360 and series[-1][0] == 2000.0 + 9_999 * 10
    for i in range(100):
        h.passed({"at": str(i)})
    assert [p["at"] for p in h.passes()[:2]] == ["99", "98"] and len(h.passes()) == 50


def test_a_runs_live_ratio_weighs_its_segments_by_their_record_bytes_and_survives_merging():
    def d(i: int, live: int | None, action: str = "keep") -> SegmentDecision:
        return SegmentDecision(base_offset=i, end_offset=i + 1, path=f"/l/{i:020d}.log", bytes=4096,
                               action=action, reasons=() if action == "delete" else ("reserved",),
                               used_bytes=None if live is None else 1000, live_bytes=live)
    runs = segment_runs([d(0, 100, "delete"), d(1, 700, "delete"), d(2, None), d(3, None), d(4, 1000)])
    assert [(r["kind"], r["count"], r["live_ratio"]) for r in runs] == [
        ("delete", 2, 0.4), ("reserved", 3, 1.0)]                     # unknown ones do not count
    assert segment_runs([d(0, None), d(1, None)])[0]["live_ratio"] is None
    merged = segment_runs([d(i, 0 if i % 2 else 1000, "delete" if i % 2 else "keep") for i in range(8)], max_runs=2)
    assert [(r["kind"], r["count"], r["live_ratio"]) for r in merged] == [("mixed", 4, 0.5), ("mixed", 4, 0.5)]


def test_a_deletion_of_an_archived_segment_is_its_own_kind_of_bar():
    def d(i: int, because: tuple[str, ...]) -> SegmentDecision:
        return SegmentDecision(base_offset=i, end_offset=i + 1, path=f"/l/{i:020d}.log", bytes=10,
                               action="delete", because=because)
    runs = segment_runs([d(0, ("expired", "archived")), d(1, ("expired", "archived")), d(2, ("expired",))])
    assert [(r["kind"], r["count"]) for r in runs] == [("evict", 2), ("delete", 1)]
