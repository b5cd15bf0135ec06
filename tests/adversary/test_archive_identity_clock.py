"""Probe: a wall-clock step does not age an archive tier's last proof.

Before: the tier's last confirmation was aged by wall-clock arithmetic, so a step of 2 h (below the
clock guard's 1-day threshold: nothing held) either way made a tier that proved itself seconds ago
*down*, and a disk force then deleted unarchived, unconsumed segments instead of waiting for the
upload run it had started. Now a proof is aged on the boot clock (boot id and /proc/uptime, which no
settimeofday moves); one from another boot is not recent."""

from __future__ import annotations

import time

import pytest

from retention_helpers import config_text, make_log, write_config

from commitlog import CommitLog
from commitlog.archive import LogArchive, open_tier, upload_sealed
from retention.deletion.watched import WatchedLog


@pytest.mark.parametrize("step_s", [2 * 3600, -2 * 3600, 0])
def test_a_wall_clock_step_leaves_a_tier_that_just_proved_itself_up(tmp_path, monkeypatch, step_s):
    bases = make_log(tmp_path / "staging", 3)
    url = f"file://{tmp_path}/tier"
    with CommitLog.open(tmp_path / "staging", readonly=True) as log:
        upload_sealed(LogArchive(open_tier(url), str(tmp_path / "staging")), log.segments()[:1],
                      now_ms=int(time.time() * 1000))
    _, config = write_config(tmp_path, config_text(tmp_path, policy={"archive": {"url": url}}))
    wall = time.time
    monkeypatch.setattr(time, "time", lambda: wall() + step_s)           # the step
    watched = WatchedLog("staging", config.logs["staging"], archive=config.policy_for("staging").archive)
    try:
        snapshot, _ = watched.snapshot()
    finally:
        watched.close()
    assert snapshot.archive_up and snapshot.archive_doubt is None
    assert [s.base_offset for s in snapshot.segments if s.archived_at is not None] == bases[:1]
