"""The hung-segment registry: persistence across restarts, damaged files, and force_after timing
against a real reader in another process (the clock injected)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone

from loguru import logger

from retention import Cleaner, read_audit
from retention.deletion.hung import HUNG_FILE, HungRegistry

from retention_helpers import config_text, make_log, segment_bases, set_age, write_config
from test_cleaner_real_fs import HOLDER


def test_first_attempt_survives_a_restart_and_later_attempts_move_only_the_last(tmp_path):
    reg = HungRegistry(str(tmp_path))
    reg.held(33, 1000.0)
    reg.held(33, 1030.0)
    reg.held(66, 1040.0)
    again = HungRegistry(str(tmp_path))                 # a restarted cleaner
    snap = again.snapshot()
    assert (snap[33].first_attempt_at, snap[33].last_attempt_at) == (1000.0, 1030.0)
    assert (snap[66].first_attempt_at, snap[66].last_attempt_at) == (1040.0, 1040.0)
    assert json.loads((tmp_path / HUNG_FILE).read_text()).keys() == {"33", "66"}


def test_forgetting_every_segment_removes_the_file(tmp_path):
    reg = HungRegistry(str(tmp_path))
    reg.held(0, 1.0)
    reg.held(33, 2.0)
    reg.forget_below(33)
    assert set(HungRegistry(str(tmp_path)).snapshot()) == {33}
    reg.forget(33)
    assert not (tmp_path / HUNG_FILE).exists() and not (tmp_path / (HUNG_FILE + ".tmp")).exists()
    reg.forget(99)                                      # nothing to forget: no error


def _warnings():
    lines: list[str] = []
    sink = logger.add(lines.append, level="WARNING", format="{message}")
    return lines, sink


def test_garbage_bytes_are_reported_in_one_line_and_ignored(tmp_path):
    (tmp_path / HUNG_FILE).write_bytes(b"\x00\xff\x13garbage{[")
    lines, sink = _warnings()
    try:
        reg = HungRegistry(str(tmp_path))
    finally:
        logger.remove(sink)
    assert reg.snapshot() == {}
    assert len(lines) == 1 and str(tmp_path / HUNG_FILE) in lines[0]
    assert "not a hung-segment registry" in lines[0] and "\n" not in lines[0].rstrip("\n")
    reg.held(33, 5.0)                                   # the next attempt rewrites it whole
    assert HungRegistry(str(tmp_path)).snapshot()[33].first_attempt_at == 5.0


def test_a_registry_of_the_wrong_shape_is_reported_and_ignored(tmp_path):
    for body in ('["a list"]', '{"33": {"first_attempt_at": "soon"}}', '{"x": {}}', "null"):
        (tmp_path / HUNG_FILE).write_text(body)
        lines, sink = _warnings()
        try:
            assert HungRegistry(str(tmp_path)).snapshot() == {}
        finally:
            logger.remove(sink)
        assert len(lines) == 1 and HUNG_FILE in lines[0], body


CONFIG = config_text(policy={"hung": {"force_after": "120s", "retry_every": "30s"}})


def test_force_after_counts_from_the_first_attempt_across_a_restart(tmp_path):
    log_dir = tmp_path / "staging"
    bases = make_log(log_dir, 3)
    set_age(log_dir, bases, 3 * 3600)
    (log_dir / HUNG_FILE).write_bytes(b"garbage")       # a damaged registry does not stop a pass
    _, config = write_config(tmp_path, CONFIG)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(log_dir)], stdout=subprocess.PIPE, text=True)
    clock = [1_800_000_000.0]
    first_at = clock[0]

    def at():
        return datetime.fromtimestamp(clock[0], timezone.utc)

    try:
        assert holder.stdout.readline().strip() == "holding"
        cleaner = Cleaner(config, clock=lambda: clock[0])
        cleaner.trigger_manual()
        assert cleaner.run_pass(at()).logs[0].actions == {bases[0]: "hung"}
        for step in (30, 60, 90):                       # retries due (retry_every), not forced yet
            clock[0] = first_at + step
            cleaner.close()
            cleaner = Cleaner(config, clock=lambda: clock[0])   # restarted every time
            cleaner.trigger_manual()
            result = cleaner.run_pass(at())
            assert result.logs[0].actions == {bases[0]: "hung"}, step
            assert cleaner.logs["staging"].hung.snapshot()[bases[0]].first_attempt_at == first_at
        clock[0] = first_at + 119.999                   # no retry due, force_after not reached
        waiting = cleaner.run_pass(at())
        assert waiting.logs[0].actions == {}
        assert waiting.to_json_dict()["logs"][0]["files"][0]["reasons"] == ["held"]
        clock[0] = first_at + 120                       # exactly force_after since the first attempt
        forced = cleaner.run_pass(at())
        assert forced.logs[0].actions[bases[0]] == "deleted"
        assert read_audit(str(tmp_path / "audit.jsonl"))[0]["forced"] is True
        assert segment_bases(log_dir) == bases[-1:]
        assert not (log_dir / HUNG_FILE).exists()       # forgotten once deleted
        cleaner.close()
    finally:
        holder.kill()
        holder.wait()
