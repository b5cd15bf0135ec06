"""disk.delete_rate with real sidecars and real files: expired segments go no faster than the rate
(the audit lines' times show it), a stop request ends the pacing at once, a disk over force_ratio
deletes at full speed and says so, and a sidecar SIGKILLed between two truncation steps leaves no
listed segment cut short; the next one finishes the removal and audits it once."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from commitlog import DELETED_SUFFIX, CommitLog, disk_usage
from retention import Cleaner
from retention.audit import read_events

from retention_helpers import config_text, make_log, segment_bases, set_age, wait_for, write_config
from sidecar_helpers import Sidecar

MIB = 1 << 20
RECORD = b"p" * (64 << 10)          # 16 per MiB: segments fill fast
UNPACED = "over force_ratio: delete_rate not applied"


def _expired_log(path: Path, segments: int, segment_size: int) -> list[int]:
    """A log of `segments` full, expired segments (and an active one); returns their bases."""
    bases = make_log(path, segments, segment_size=segment_size, record=RECORD)[:-1]
    set_age(path, bases, 2 * 3600)
    return bases


def _deleted(audit: Path) -> list[dict]:
    return [e for e in read_events(str(audit)) if e.get("event") == "deleted"]


def _seconds(entry: dict) -> float:
    return datetime.fromisoformat(entry["time"]).timestamp()


def _config(tmp_path: Path, segment_size: str, rate: str | None, **policy):
    disk = {"delete_rate": rate, **policy.pop("disk", {})}
    return write_config(tmp_path, config_text(tmp_path, sidecar=True, log={"segment_size": segment_size},
                                              policy={"files_per_pass": 20, "disk": disk, **policy}))


def _clean_in_background(sidecar: Sidecar) -> threading.Thread:
    """POST /clean from a thread (the pass answers once done; the test acts meanwhile)."""
    def post():
        try:
            sidecar.request("POST", "/clean", timeout=60)
        except OSError:
            pass        # the sidecar was stopped or killed mid-pass: what the test is about
    thread = threading.Thread(target=post, daemon=True)
    thread.start()
    return thread


def test_expired_segments_go_no_faster_than_the_rate(tmp_path):
    """Six 1 MiB segments at 2 MiB/s: from the first deletion to the last, five have been paid for."""
    _expired_log(tmp_path / "staging", 6, MIB)
    config_path, _ = _config(tmp_path, "1MiB", "2MiB")
    with Sidecar(config_path, cwd=tmp_path) as sidecar:
        status, _, body = sidecar.request("POST", "/clean", timeout=60)
        assert status == 200, body
    deleted = _deleted(tmp_path / "audit.jsonl")
    assert len(deleted) == 6 and all(e["paced"] is True and "unpaced" not in e for e in deleted)
    span = _seconds(deleted[-1]) - _seconds(deleted[0])
    owed = sum(e["bytes"] for e in deleted[:-1]) / (2 * MIB)          # 2.5 s
    assert span >= owed - 0.01, f"6 MiB went in {span:.3f}s; the rate allows no less than {owed:.3f}s"
    log_result = json.loads(body)["logs"][0]
    assert log_result["paced_seconds"] >= owed - 0.01


def test_a_stop_request_ends_a_paced_pass_at_once(tmp_path):
    """Ten 1 MiB segments at 256 KiB/s would take 36 s; SIGTERM after the first exits within seconds."""
    _expired_log(tmp_path / "staging", 10, MIB)
    config_path, _ = _config(tmp_path, "1MiB", "256KiB")
    sidecar = Sidecar(config_path, cwd=tmp_path).start()
    try:
        _clean_in_background(sidecar)
        wait_for(lambda: _deleted(tmp_path / "audit.jsonl"), "the first deletion")
        asked = time.monotonic()
        sidecar.send(signal.SIGTERM)
        assert sidecar.wait(timeout=10) == 0, sidecar.log()
        took = time.monotonic() - asked
    finally:
        sidecar.stop()
    assert took < 3.0, f"exit took {took:.1f}s after SIGTERM"
    assert len(_deleted(tmp_path / "audit.jsonl")) < 10
    assert "Traceback" not in sidecar.log()


@pytest.mark.parametrize("small_fs", [("tmpfs", 24 << 20)], indirect=True)
def test_over_force_ratio_deletion_ignores_the_rate_and_says_so(small_fs, tmp_path):
    """A disk over force_ratio with a rate of 64 KiB/s (16 s a segment): the sidecar's force takes
    it back under the ratio within seconds, every deletion audited unpaced with the reason."""
    log_dir = Path(small_fs) / "staging"
    make_log(log_dir, 14, segment_size=MIB, record=RECORD)      # fresh: only the force deletes
    assert disk_usage(small_fs).used_ratio > 0.5
    audit = tmp_path / "audit.jsonl"
    path, _ = write_config(tmp_path, config_text(
        sidecar=True, service={"audit": str(audit)}, log={"path": str(log_dir), "segment_size": "1MiB"},
        policy={"files_per_pass": 20, "disk_check_interval": "1s",
                "disk": {"clean_ratio": 0.3, "force_ratio": 0.5, "force_target": 0.3,
                         "refuse_writes_ratio": 0.95, "delete_rate": "64KiB"}}))
    started = time.monotonic()
    with Sidecar(path, cwd=tmp_path) as sidecar:
        sidecar.wait_for(lambda: disk_usage(small_fs).used_ratio <= 0.3, timeout=20,
                         what="the force down to force_target")
        took = time.monotonic() - started
        log = sidecar.log()
    deleted = _deleted(audit)
    assert len(deleted) >= 4, deleted
    # Paced, four megabytes would have taken a minute.
    assert took < 4 * MIB / (64 << 10), took
    assert all(e["paced"] is False and e["unpaced"] == UNPACED for e in deleted)
    assert f"staging: {UNPACED}" in log


@pytest.mark.parametrize("small_fs", [("tmpfs", 16 << 20)], indirect=True)
def test_the_disk_going_over_force_ratio_midway_lifts_the_rate(small_fs, tmp_path):
    """A paced pass (a fake sleep: the first wait is when a writer fills the disk) stops pacing as
    soon as it sees the disk over force_ratio, and its later deletions say why."""
    log_dir = Path(small_fs) / "staging"
    _expired_log(log_dir, 4, MIB)
    _, config = write_config(tmp_path, config_text(
        service={"audit": str(tmp_path / "audit.jsonl")}, log={"path": str(log_dir), "segment_size": "1MiB"},
        policy={"disk": {"clean_ratio": 0.7, "force_ratio": 0.8, "refuse_writes_ratio": 0.95,
                         "delete_rate": "64KiB"}}))
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        if not waits:                     # a writer takes the disk over force_ratio meanwhile
            with open(Path(small_fs) / "filler", "wb") as f:
                f.write(b"\0" * int(disk_usage(small_fs).free_bytes - 2 * MIB))
        waits.append(seconds)

    cleaner = Cleaner(config)
    try:
        cleaner.trigger_manual()
        result = cleaner.run_pass(sleep=sleep)
    finally:
        cleaner.close()
    log_result = result.logs[0]
    assert log_result.deleted == 4 and log_result.unpaced == "over force_ratio: delete_rate not applied"
    assert len(waits) == 1, waits           # one slice waited, none after
    deleted = _deleted(tmp_path / "audit.jsonl")
    assert [e["paced"] for e in deleted] == [True, False, False, False]
    assert all(e["unpaced"] == UNPACED for e in deleted[1:])


def test_a_sigkill_between_truncation_steps_leaves_no_listed_segment_cut_short(tmp_path):
    """8 MiB segments at 2 MiB/s go in 1 MiB steps; killed after a step or two, the log lists only
    whole segments, reads every record it keeps, and the next sidecar finishes the removal and
    audits it once."""
    log_dir = tmp_path / "staging"
    bases = _expired_log(log_dir, 2, 8 * MIB)
    with CommitLog.open(log_dir, readonly=True) as log:
        end = log.end_offset
    config_path, _ = _config(tmp_path, "8MiB", "2MiB")
    audit = tmp_path / "audit.jsonl"
    sidecar = Sidecar(config_path, cwd=tmp_path).start()
    try:
        _clean_in_background(sidecar)
        doomed = str(log_dir / f"{bases[0]:020d}.log{DELETED_SUFFIX}")
        wait_for(lambda: os.path.exists(doomed) and 0 < os.path.getsize(doomed) < 7 * MIB,
                 "a segment truncated by a step or two", timeout=20)
        sidecar.send(signal.SIGKILL)
        sidecar.wait(timeout=10)
    finally:
        sidecar.stop()
    assert 0 < os.path.getsize(doomed) < 8 * MIB                 # really killed mid-truncation
    assert not _deleted(audit)                                    # its outcome never written
    # Every segment still listed is whole, and every record from the start offset on reads back.
    assert segment_bases(log_dir) == bases[1:] + [segment_bases(log_dir)[-1]]
    assert all(os.path.getsize(log_dir / f"{b:020d}.log") == 8 * MIB for b in segment_bases(log_dir))
    with CommitLog.open(log_dir, readonly=True) as log:
        assert log.start_offset == bases[1]
        assert [r.value for r in log.scan(log.start_offset, end)] == [RECORD] * (end - bases[1])
    with Sidecar(config_path, cwd=tmp_path) as sidecar:
        status, _, body = sidecar.request("POST", "/clean", timeout=60)
        assert status == 200, body
    assert not os.path.exists(doomed)
    outcomes = [e for e in read_events(str(audit)) if e.get("base_offset") == bases[0] and e.get("event") != "intent"]
    assert [(e["event"], e.get("intent_time") is not None) for e in outcomes] == [("deleted", True)]
    assert [e["base_offset"] for e in _deleted(audit)] == bases
