"""`commitlog segments`, `dump` and `groups` on a real log: what each prints, as text and JSON."""

from __future__ import annotations

import base64
import json
from datetime import datetime, timezone

from commitlog import CommitLog
from commitlog.archive import LogArchive, open_tier, upload_sealed
from commitlog.record import HEADER_SIZE

from tool_helpers import SEGMENT, T0, make_log, run_tool, value_of


def test_segments_lists_offsets_bytes_times_state_archived_and_live_ratio(tmp_path):
    path = tmp_path / "app"
    make_log(path)
    with CommitLog.open(path, readonly=True) as log:
        log.mark_dead(range(10, 40))
        infos = log.segments()
        upload_sealed(LogArchive(open_tier(f"file://{tmp_path}/archive"), str(path)), infos, now_ms=T0, limit=2)
    out = run_tool("segments", path, "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    rows = data["segments"]
    assert (data["start_offset"], data["end_offset"], data["segment_size"]) == (0, 600, SEGMENT)
    assert [(r["base_offset"], r["end_offset"], r["bytes"], r["used_bytes"]) for r in rows] == \
        [(s.base_offset, s.end_offset, s.size, s.used_bytes) for s in infos]
    assert all(a["end_offset"] == b["base_offset"] for a, b in zip(rows, rows[1:]))
    assert rows[0]["first_timestamp_ms"] == T0 and rows[-1]["last_timestamp_ms"] == T0 + 599_000
    assert rows[0]["first_timestamp"] == "2027-01-15T08:00:00.000Z"
    assert [r["state"] for r in rows] == ["sealed"] * (len(rows) - 1) + ["active"]
    assert [r["archived"] for r in rows] == [True, True] + [False] * (len(rows) - 2)
    assert rows[0]["live_ratio"] < 1 and all(r["live_ratio"] == 1 for r in rows[1:])
    assert not any(r["short"] for r in rows)
    text = run_tool("segments", path)
    assert text.returncode == 0 and "sealed,archived" in text.stdout and "active" in text.stdout
    assert f"offsets [0, 600), {len(rows)} segments of {SEGMENT} bytes" in text.stdout


def test_dump_prints_records_as_json_lines_utf8_where_they_decode_base64_otherwise(tmp_path):
    path = tmp_path / "app"
    make_log(path, records=50)
    out = run_tool("dump", path, "--from", "3", "--count", "3")
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["offset"] for r in lines] == [3, 4, 5]
    three, four, five = lines
    assert three["value"] == "value-3" and three["value_encoding"] == "utf-8" and three["key"] == "k3"
    assert four["value_encoding"] == "base64" and base64.b64decode(four["value"]) == value_of(4)
    assert five["key"] is None and five["key_encoding"] is None
    assert three["timestamp_ms"] == T0 + 3000 and three["timestamp"].endswith("Z")
    everything = run_tool("dump", path)
    assert [json.loads(line)["offset"] for line in everything.stdout.splitlines()] == list(range(50))


def test_dump_since_a_time_as_iso_8601_or_epoch_milliseconds(tmp_path):
    path = tmp_path / "app"
    make_log(path, records=50)
    iso = datetime.fromtimestamp((T0 + 9_500) / 1000, timezone.utc).isoformat()
    for since in (iso, str(T0 + 9_500)):
        out = run_tool("dump", path, "--since", since, "--count", "2")
        assert out.returncode == 0, out.stderr
        assert [json.loads(line)["offset"] for line in out.stdout.splitlines()] == [10, 11]
    late = run_tool("dump", path, "--since", str(T0 + 10**9))
    assert late.returncode == 0 and late.stdout == ""


def _framed(log: CommitLog, start: int) -> int:
    return sum(HEADER_SIZE + len(r.value) + len(r.key or b"") for r in log.scan(start))


def test_groups_lists_committed_offset_lag_in_records_and_bytes_and_last_commit(tmp_path):
    path = tmp_path / "app"
    make_log(path)
    out = run_tool("groups", path, "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    groups = {g["group"]: g for g in data["groups"]}
    with CommitLog.open(path, readonly=True) as log:
        times = log.commit_times()
        for name, offset in (("audit", 7), ("billing", 120)):
            g = groups[name]
            assert g["committed_offset"] == offset and g["lag_records"] == 600 - offset
            assert g["lag_bytes"] == _framed(log, offset)
            assert abs(datetime.fromisoformat(g["last_commit"]).timestamp() - times[name]) < 0.001
    text = run_tool("groups", path)
    assert "2 consumer groups" in text.stdout and "billing" in text.stdout and "480" in text.stdout


def test_groups_reset_to_earliest_latest_an_offset_or_a_time_and_delete(tmp_path):
    path = tmp_path / "app"
    make_log(path)

    def committed():
        with CommitLog.open(path, readonly=True) as log:
            return log.committed()
    for where, expected in (("earliest", 0), ("latest", 600), ("42", 42),
                            (datetime.fromtimestamp((T0 + 99_000) / 1000, timezone.utc).isoformat(), 99),
                            (f"@{T0 + 98_500}", 99)):
        out = run_tool("groups", path, "--reset", "billing", "--to", where, "--json")
        assert out.returncode == 0, out.stderr
        change = json.loads(out.stdout)
        assert change["after"] == expected and change["action"] == "reset" and not change["forced"]
        assert committed() == {"billing": expected, "audit": 7}
    text = run_tool("groups", path, "--reset", "billing", "--to", "5")
    assert text.stdout.strip() == f"group billing: committed offset 99 -> 5 (--to 5) in {path}"
    gone = run_tool("groups", path, "--delete", "audit")
    assert gone.returncode == 0 and "deleted (it had committed offset 7)" in gone.stdout
    assert committed() == {"billing": 5}
