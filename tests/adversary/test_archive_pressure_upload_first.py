"""Probe: under disk pressure, an archive that can take the data is asked first.

Before: with a tier configured and up, a disk above force_ratio (below refuse_writes_ratio) had its
unarchived segments deleted at the first pass, the unconsumed records of a lagging group included,
while the upload job waited for its next `archive.interval` (30 s). Now the crossing starts the
uploads at once, the archived segments are evicted as they land, and an unarchived segment goes
only when the tier is down (or the disk reaches refuse_writes_ratio): then it is deleted and
audited as lost, as before."""

from __future__ import annotations

import json
import os

import pytest

from archive_identity_helpers import Sidecar, deletions, sidecar_config

from commitlog import CommitLog
from commitlog.archive import open_tier
from commitlog.layout import archive_state_path

SEGMENT = 1 << 20
RECORD = os.urandom(4000)
FORCE = 0.6


def _used(path) -> float:
    st = os.statvfs(path)
    return 1 - st.f_bavail / st.f_blocks


def _forces_ended(sidecar: Sidecar) -> int:
    return sidecar.log().count("is back at or below force_target")


def _fill(log_dir, ratio: float) -> int:
    """Append until the disk is `ratio` used; returns the log's end offset."""
    with CommitLog.open(log_dir, segment_size=SEGMENT, flush="none") as log:
        while _used(log_dir) < ratio:
            log.append_batch([RECORD] * 16)
        return log.end_offset


@pytest.mark.parametrize("small_fs", [("tmpfs", 32 << 20)], indirect=True)
def test_a_force_uploads_first_and_deletes_unarchived_data_only_with_the_tier_down(small_fs, tmp_path):
    log_dir = f"{small_fs}/staging"
    url = f"file://{tmp_path}/tier"
    with CommitLog.open(log_dir, segment_size=SEGMENT, flush="none") as log:
        log.append_batch([RECORD] * 16)
        log.commit("etl", 0)                      # a group that lags behind everything
    config = sidecar_config(tmp_path, {"url": url, "interval": "30s"}, policy={
        "reserve": "72h", "delete_at_hours": [], "interval": "1h", "disk_check_interval": "1s",
        "disk": {"clean_ratio": 0.5, "force_ratio": FORCE, "force_target": 0.1,
                 "refuse_writes_ratio": 0.95}})
    config.write_text(config.read_text().replace(f"path: {tmp_path}/staging", f"path: {log_dir}")
                      .replace("segment_size: 4KiB", "segment_size: 1MiB"))
    with Sidecar(config, cwd=tmp_path) as sidecar:
        sidecar.wait_for(lambda: sidecar.get_json("/status")[1]["archive"]["staging"]["last_success_at"],
                         timeout=60, what="the tier's first confirmation")
        end = _fill(log_dir, 0.75)
        sidecar.wait_for(lambda: _forces_ended(sidecar) == 1, timeout=60, what="the disk back under force_target")
        lost = [e for e in deletions(tmp_path) if not e["archived"]]
        assert deletions(tmp_path) and lost == []
        with CommitLog.open(log_dir, readonly=True, archive=open_tier(url)) as log:
            assert [r.offset for r in log.scan()] == list(range(end))

        os.rename(f"{tmp_path}/tier", f"{tmp_path}/tier.away")
        open(f"{tmp_path}/tier", "w").close()     # the tier is down: nothing can be written there
        _fill(log_dir, 0.75)
        sidecar.wait_for(lambda: _forces_ended(sidecar) == 2, timeout=60, what="the disk back under force_target")
    lost = [e for e in deletions(tmp_path) if not e["archived"]]
    assert lost and all(any(u["group"] == "etl" for u in e["unconsumed"]) for e in lost)


@pytest.mark.parametrize("small_fs", [("tmpfs", 32 << 20)], indirect=True)
def test_a_sidecar_started_on_a_forcing_disk_uploads_before_it_deletes(small_fs, tmp_path):
    # The case: the sidecar (re)starts with the disk at 75 % and a tier that was fine
    # minutes ago; its first pass used to delete at once what the upload job, 30 s later, would
    # have taken in under a second.
    log_dir = f"{small_fs}/staging"
    url = f"file://{tmp_path}/tier"
    with CommitLog.open(log_dir, segment_size=SEGMENT, flush="none") as log:
        log.append_batch([RECORD] * 16)
        log.commit("etl", 0)
    config = sidecar_config(tmp_path, {"url": url, "interval": "30s"}, policy={
        "reserve": "72h", "delete_at_hours": [], "interval": "1h", "disk_check_interval": "1s",
        "disk": {"clean_ratio": 0.5, "force_ratio": FORCE, "force_target": 0.1, "refuse_writes_ratio": 0.95}})
    config.write_text(config.read_text().replace(f"path: {tmp_path}/staging", f"path: {log_dir}")
                      .replace("segment_size: 4KiB", "segment_size: 1MiB"))
    with Sidecar(config, cwd=tmp_path) as sidecar:
        sidecar.wait_for(lambda: sidecar.get_json("/status")[1]["archive"]["staging"]["last_success_at"],
                         timeout=60, what="the tier's first confirmation")
    state = json.loads(open(archive_state_path(log_dir)).read())
    state["confirmed_at_ms"] -= 5 * 60 * 1000         # stopped five minutes ago
    state["confirmed_uptime"] -= 5 * 60
    open(archive_state_path(log_dir), "w").write(json.dumps(state))
    end = _fill(log_dir, 0.75)
    with Sidecar(config, cwd=tmp_path) as sidecar:
        sidecar.wait_for(lambda: _forces_ended(sidecar) == 1, timeout=60, what="the disk back under force_target")
    assert deletions(tmp_path) and [e for e in deletions(tmp_path) if not e["archived"]] == []
    with CommitLog.open(log_dir, readonly=True, archive=open_tier(url)) as log:
        assert [r.offset for r in log.scan()] == list(range(end))
