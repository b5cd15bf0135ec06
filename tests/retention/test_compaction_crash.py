"""A compacting process SIGKILLed between its intent and its outcome leaves an intent the next pass
settles with `recovered: true`, saying whether the output happened by looking at the log; no live
record is lost either way."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from loguru import logger

from commitlog import CommitLog, segment_name
from retention import read_events
from retention.compaction.compactor import Compactor

from compaction_helpers import compaction_config, dead_log, scan_pairs
from sidecar_helpers import Sidecar

CHILD = Path(__file__).with_name("compact_child.py")


def _run_child(config_path: Path, point: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHILD), str(config_path), point], cwd=cwd,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("point, event, reason", [
    ("after-intent", "aborted", "not-compacted"),
    ("after-commit", "compacted", None),
    ("before-outcome", "compacted", None),
])
def test_an_intent_left_by_a_killed_compaction_is_settled_by_the_next_pass(tmp_path, point, event, reason):
    live = dead_log(tmp_path / "a", 4)
    config_path, config = compaction_config(tmp_path, tmp_path / "a", merge="false")
    done = _run_child(config_path, point, tmp_path)
    assert done.returncode == -signal.SIGKILL, done.stderr
    events = read_events(str(tmp_path / "audit.jsonl"))
    assert [e["event"] for e in events] == ["intent"]
    intent = events[0]
    assert scan_pairs(tmp_path / "a") == live            # whatever happened, nothing live was lost

    lines: list[str] = []
    sink = logger.add(lines.append, level="WARNING", format="{message}")
    try:
        c = Compactor(config)
        result = c.run()
        c.close()
    finally:
        logger.remove(sink)
    said = [line for line in lines if "settled" in line]
    assert len(said) == 1 and said[0].startswith(f"{intent['log']}: settled 1 audit intent of "
                                                 f"interrupted compactions (pid {intent['pid']}"), said
    assert said[0].rstrip().endswith(f"1 {reason or 'compacted'}"), said
    events = read_events(str(tmp_path / "audit.jsonl"))
    settled = [e for e in events if e.get("id") == intent["id"] and e["event"] != "intent"]
    assert len(settled) == 1
    line = settled[0]
    assert line["event"] == event and line["recovered"] is True
    assert (line["first_offset"], line["end_offset"]) == (intent["first_offset"], intent["end_offset"])
    if reason is not None:
        assert line["reason"] == reason
    else:
        assert line["bytes_before"] == intent["bytes_before"] and 0 < line["bytes_after"] < line["bytes_before"]
    # The next pass finishes the work: every segment is compacted once, and each once audited.
    compacted = [e for e in events if e["event"] == "compacted"]
    spans = sorted((e["first_offset"], e["end_offset"]) for e in compacted)
    assert len(spans) == len(set(spans)) == 4
    assert result.logs[0].error is None
    assert scan_pairs(tmp_path / "a") == live


def test_a_restarted_sidecar_settles_a_killed_compactions_intent_at_start(tmp_path):
    """A sidecar settled the intent a killed one left only at its first compaction pass,
    `compaction.interval` after its start: the soak's last sidecar, stopped 1.6 s after its start
    (interval 2 s), left one open, and the inputs it superseded held their space meanwhile."""
    live = dead_log(tmp_path / "a", 4)
    config_path, _ = compaction_config(tmp_path, tmp_path / "a", interval="1h")
    done = _run_child(config_path, "after-commit", tmp_path)
    assert done.returncode == -signal.SIGKILL, done.stderr
    audit = str(tmp_path / "audit.jsonl")
    intent = read_events(audit)[0]
    assert len(intent["inputs"]) > 1 and (tmp_path / "a" / intent["inputs"][1]).exists()
    with Sidecar(config_path, cwd=tmp_path) as sidecar:
        settled = sidecar.wait_for(lambda: [e for e in read_events(audit) if e.get("id") == intent["id"]
                                            and e["event"] != "intent"], timeout=10, what="the intent settled")
    assert [(e["event"], e["recovered"]) for e in settled] == [("compacted", True)]
    assert not any((tmp_path / "a" / name).exists() for name in intent["inputs"][1:]), "superseded inputs kept"
    assert scan_pairs(tmp_path / "a") == live


def test_a_child_that_is_not_killed_leaves_nothing_to_settle(tmp_path):
    dead_log(tmp_path / "a", 2)
    config_path, config = compaction_config(tmp_path, tmp_path / "a")
    done = _run_child(config_path, "none", tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["outputs"] == 1
    c = Compactor(config)
    assert c.settle() == 0
    c.close()


# ---------------------------------------------------------------------------------------------
# The sweep: a kill before every file-changing call of a pass.

def _facts(log_dir: Path) -> tuple[set[int], list[tuple[int, int]]]:
    """Every offset the log still holds a record for (marked ones too), and its segments' spans."""
    with CommitLog.open(log_dir, readonly=True) as log:
        present = {f[0] for f in log.record_facts(log.marks_snapshot())}
        return present, [(s.base_offset, s.end_offset) for s in log.segments()]


def _check_after_kill(log_dir: Path, live: list, segments: list[tuple[int, int]], live_offsets: set[int]) -> None:
    """No live record lost, no offset served by two files, each original segment either untouched
    or compacted (only its live records left), never in between."""
    assert scan_pairs(log_dir) == live
    present, spans = _facts(log_dir)
    for (b1, e1), (b2, _) in zip(spans, spans[1:]):
        assert e1 <= b2, f"offsets [{b2}, {e1}) served by two files: {spans}"
    for base, end in segments:
        held = {o for o in present if base <= o < end}
        whole, kept = set(range(base, end)), {o for o in live_offsets if base <= o < end}
        assert held in (whole, kept), f"segment [{base}, {end}) is neither original nor compacted"


def _check_settled(audit: Path, log_dir: Path, live_offsets: set[int]) -> Counter:
    """Right after a settle: no leftover file; a recovered `compacted` line's dead records are gone
    from the log, a recovered `aborted` line's all there. Returns the recovered lines by event."""
    present, spans = _facts(log_dir)
    # The settle also finished what the killed process left: superseded inputs, `.cleaned` files
    # (a `.deleted` one is the head removers' to finish, as after a killed removal).
    files = sorted(p.name for p in log_dir.iterdir() if p.name.endswith((".log", ".cleaned")))
    assert files == [segment_name(b) for b, _ in spans]
    recovered = [e for e in read_events(str(audit)) if e.get("recovered")]
    for e in recovered:
        span = set(range(e["first_offset"], e["end_offset"]))
        if e["event"] == "compacted":
            assert span & present == span & live_offsets, e
        else:
            assert e["event"] == "aborted" and e["reason"] == "not-compacted" and span <= present, e
    return Counter(e["event"] for e in recovered)


def _check_coverage(audit: Path, log_dir: Path, original: set[int], live_offsets: set[int]) -> None:
    """The `compacted` spans cover exactly what left the log; every intent has one outcome."""
    events = read_events(str(audit))
    intents = {e["id"]: e for e in events if e["event"] == "intent"}
    outcomes = Counter(e["id"] for e in events if e["event"] != "intent")
    assert outcomes == Counter(set(intents)), "an intent without exactly one outcome (or an outcome without intent)"
    present, _ = _facts(log_dir)
    left = original - present
    compacted = [e for e in events if e["event"] == "compacted"]
    for o in sorted(left):
        lines = [e for e in compacted if e["first_offset"] <= o < e["end_offset"]]
        assert lines, f"offset {o} left the log without a compacted line"
        assert sum(not e.get("recovered") for e in lines) <= 1 and (len(lines) == 1 or all(
            e.get("recovered") for e in lines[1:])), f"offset {o} audited twice: {lines}"
    for e in compacted:
        span = set(range(e["first_offset"], e["end_offset"]))
        assert span <= original and span & present == span & live_offsets, f"{e} claims what did not leave"
        if not e.get("recovered"):
            assert e["dropped"]["dead"] == len(span & left), e
        for name, ino in zip(intents[e["id"]]["inputs"], intents[e["id"]]["input_inodes"]):
            p = log_dir / name
            assert not p.exists() or p.stat().st_ino != ino, f"{e} but its input {name} is still there"


@pytest.mark.parametrize("merge, fully_dead, outputs, no_file", [
    ("false", (2,), 4, "00000000000000000066.log"),     # 4 one-input outputs, the no-file one first
    ("true", (0, 1), 2, "00000000000000000000.log"),    # two-input outputs: the no-file one, then one
])                                                      # whose second input is removed after its commit
def test_a_kill_before_every_file_system_call_of_a_pass_leaves_every_output_audited(
        tmp_path, merge, fully_dead, outputs, no_file):
    """A real compacting process (a `Compactor` pass over 4 sealed 4 KiB segments two thirds dead,
    one or two of them wholly dead so a no-file output is among the outputs) is SIGKILLed just
    before its Nth file-changing call (opens for writing, writes, fsyncs, utime, renames, unlinks;
    counted by compact_child.py `calls:N`), for EVERY N from 1 to the count of a pass that is not
    killed, no bound: merge false, 77 calls (settle, 4 one-input outputs: intents, swaps, outcomes);
    merge true, 49 calls (a two-input no-file output, then a two-input output whose second input is
    removed after the commit rename). After each kill: no live record lost, no offset in two files;
    a fresh pass settles (no leftover file, recovered lines checked against the log) and finishes;
    the `compacted` spans then cover exactly the offsets that left, each once (a duplicate only
    if recovered), every intent has one outcome, and the log equals that of a pass not killed."""
    template = tmp_path / "template"
    live = dead_log(template / "a", 4, fully_dead=fully_dead)
    live_offsets = {o for o, _ in live}
    original, spans = _facts(template / "a")
    sealed = spans[:-1]

    dry = tmp_path / "dry"
    shutil.copytree(template, dry)
    config_path, _ = compaction_config(dry, dry / "a", merge=merge)
    done = _run_child(config_path, "calls:0", dry)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    calls = report["calls"]
    assert report["outputs"] == outputs and len(calls) >= 10 * outputs, report
    assert sum(c == f"rename {no_file}" for c in calls) == 1   # the no-file output
    finished, _ = _facts(dry / "a")
    assert finished == live_offsets

    recovered: Counter = Counter()
    for n in range(1, len(calls) + 1):
        run = tmp_path / f"kill{n}"
        shutil.copytree(template, run)
        config_path, config = compaction_config(run, run / "a", merge=merge)
        audit = run / "audit.jsonl"
        try:
            killed = _run_child(config_path, f"calls:{n}", run)
            assert killed.returncode == -signal.SIGKILL, killed.stderr
            # The kill landed where the count says: one audit line per audit write before it.
            lines = audit.read_bytes().count(b"\n") if audit.exists() else 0
            assert lines == sum(c == "write audit.jsonl" for c in calls[:n - 1])
            _check_after_kill(run / "a", live, sealed, live_offsets)
            c = Compactor(config)
            try:
                c.settle()
                recovered += _check_settled(audit, run / "a", live_offsets)
                result = c.run()
            finally:
                c.close()
            assert result.logs[0].error is None
            assert scan_pairs(run / "a") == live
            assert _facts(run / "a")[0] == finished
            _check_coverage(audit, run / "a", original, live_offsets)
        except AssertionError as exc:
            pytest.fail(f"killed before call {n} ({calls[n - 1]}): {exc}")
        shutil.rmtree(run)
    # Kills landed on both sides of the commit points (measured: 15 compacted, 50 aborted).
    assert recovered["compacted"] > 0 and recovered["aborted"] > 0, recovered
    print(f"{len(calls)} kill points, recovered lines {dict(recovered)}")
