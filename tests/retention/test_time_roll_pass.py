"""roll_after in a pass: a slow log's last segment, whose first record is older than roll_after, is
sealed short when no writer has it open, and goes in the same pass once it is expired; a log with a
writer open is left to that writer; the sidecar counts the rolls."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from commitlog import CommitLog, list_segments
from retention import Cleaner

from retention_helpers import SEGMENT, config_text, segment_bases, set_age, write_config
from sidecar_helpers import Sidecar

RECORD = b"r" * 100
EVERY_HOUR = list(range(24))


def slow_log(path, *, records: int = 5, age: float = 3 * 3600) -> None:
    """A log whose only segment holds a few records written `age` seconds ago."""
    written = int((time.time() - age) * 1000)
    with CommitLog.open(path, segment_size=SEGMENT, flush="none") as log:
        for i in range(records):
            log.append(RECORD, timestamp_ms=written + i)
    set_age(path, [0], age)


def _config(tmp_path, *, sidecar: bool = False, **policy):
    policy = {"roll_after": "1h", "delete_at_hours": EVERY_HOUR, **policy}
    return write_config(tmp_path, config_text(tmp_path, sidecar=sidecar, policy=policy))


def _pass(config):
    cleaner = Cleaner(config)
    try:
        return cleaner.run_pass()
    finally:
        cleaner.close()


def test_a_pass_seals_an_idle_logs_old_segment_and_deletes_it_once_expired(tmp_path):
    slow_log(tmp_path / "staging")
    _, config = _config(tmp_path)
    result = _pass(config)
    log_result = result.logs[0]
    assert log_result.rolled and log_result.deleted == 1
    assert log_result.to_json_dict(executed=True)["rolled"] is True
    assert segment_bases(tmp_path / "staging") == []           # sealed, expired, gone
    with CommitLog.open(tmp_path / "staging") as log:            # the writer carries on at the end
        assert log.start_offset == 5 and log.append(RECORD) == 5


def test_a_sealed_segment_not_yet_expired_stays_short_until_it_is(tmp_path):
    slow_log(tmp_path / "staging", age=2 * 3600)
    _, config = _config(tmp_path, reserve="3h")
    log_result = _pass(config).logs[0]
    assert log_result.rolled and log_result.deleted == 0
    decision = log_result.plan.decisions[0]
    assert decision.reasons == ("reserved",)                   # not "active": nothing writes to it
    sizes = [s.size for s in list_segments(str(tmp_path / "staging")).segments]
    assert sizes == [5 * 121 + 4]                              # its tail given back
    assert not _pass(config).logs[0].rolled                    # sealed once


def test_a_young_segment_and_a_policy_without_roll_after_are_not_rolled(tmp_path):
    slow_log(tmp_path / "staging", age=600)
    _, config = _config(tmp_path)
    assert not _pass(config).logs[0].rolled
    slow_log(tmp_path / "other", age=3 * 3600)
    _, config = write_config(tmp_path, config_text(tmp_path, log={"path": str(tmp_path / "other")},
                                                   policy={"delete_at_hours": EVERY_HOUR}), "plain.yaml")
    log_result = _pass(config).logs[0]
    assert not log_result.rolled and log_result.deleted == 0
    assert [s.size for s in list_segments(str(tmp_path / "other")).segments] == [SEGMENT]


def test_a_log_with_a_writer_open_is_left_to_the_writer(tmp_path):
    slow_log(tmp_path / "staging")
    writer = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from commitlog import CommitLog
        log = CommitLog.open({str(tmp_path / "staging")!r})
        print("open", flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "open"
        _, config = _config(tmp_path)
        log_result = _pass(config).logs[0]
        assert not log_result.rolled and log_result.deleted == 0
        assert log_result.plan.decisions[0].reasons[0] == "active"
        assert [s.size for s in list_segments(str(tmp_path / "staging")).segments] == [SEGMENT]
    finally:
        writer.kill()
        writer.wait()


def test_the_sidecar_rolls_an_idle_log_and_counts_it(tmp_path):
    slow_log(tmp_path / "staging")
    path, _ = _config(tmp_path, sidecar=True, reserve="4h")
    with Sidecar(path, cwd=tmp_path) as sidecar:
        sidecar.wait_ready()
        def counted() -> bool:
            return 'retention_rolled_segments_total{log="staging"} 1.0' in \
                sidecar.request("GET", "/metrics")[2].decode()

        sidecar.wait_for(counted, what="the roll counted")
        status = sidecar.get_json("/status")[1]
        assert status["logs"][0]["segments"] == 1
        assert status["logs"][0]["last_pass"]["rolled"] is True       # the start-up pass, the only one
        assert status["policies"]["default"]["roll_after_seconds"] == 3600
    assert [s.size for s in list_segments(str(tmp_path / "staging")).segments] == [5 * 121 + 4]
    assert "sealed its last segment" in sidecar.log()


@pytest.mark.parametrize("small_fs", [("tmpfs", 8 << 20)], indirect=True)
def test_a_roll_the_mount_refuses_leaves_the_log_planned(small_fs, tmp_path):
    log_dir = Path(small_fs) / "staging"
    slow_log(log_dir)
    subprocess.run(["mount", "-o", "remount,ro", small_fs], check=True, capture_output=True)
    _, config = write_config(tmp_path, config_text(tmp_path, log={"path": str(log_dir)}, policy={
        "roll_after": "1h", "delete_at_hours": EVERY_HOUR, "reserve": "4h"}))
    log_result = _pass(config).logs[0]
    assert log_result.error is None and log_result.plan is not None, log_result.error
    assert not log_result.rolled and log_result.plan.decisions[0].reasons[0] == "active"
