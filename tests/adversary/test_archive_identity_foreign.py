"""Probe: another tier reached at the archive's URL (an NFS export swapped, another host's bucket
holding a log of the same name) must not become the manifest copy local eviction trusts.

Before: every reader of the archive (`LogArchive.manifest()`: tiered reads, `retention archive
status`, `archive verify` even after naming the mismatch) wrote the tier's manifest over this host's
copy, checking the identity this host remembered against itself; the copy, confirmed moments ago,
then listed segments never uploaded from here and eviction deleted them as "archived". And a proof
made at one URL was trusted under another. Now only a tier that showed its identity writes the
copy, and a proof holds only at the URL it was made at."""

from __future__ import annotations

import os
import shutil
import time

from retention_helpers import config_text, make_log, write_config

from commitlog import CommitLog
from commitlog.archive import LogArchive, open_tier, upload_sealed
from commitlog.layout import archive_manifest_path
from retention.archiving.commands import archive_command
from retention.deletion.watched import WatchedLog


def _upload(log_dir, url: str, count: int | None = None) -> None:
    with CommitLog.open(log_dir, readonly=True) as log:
        sealed = [s for s in log.segments() if not s.active]
    upload_sealed(LogArchive(open_tier(url), str(log_dir)), sealed[:count], now_ms=int(time.time() * 1000))


def _archived_bases(tmp_path, url: str) -> list[int]:
    """The segments of log `staging` a pass would take as archived now (with the tier at `url`)."""
    _, config = write_config(tmp_path, config_text(tmp_path, policy={"archive": {"url": url}}))
    watched = WatchedLog("staging", config.logs["staging"], archive=config.policy_for("staging").archive)
    try:
        snapshot, _ = watched.snapshot()
    finally:
        watched.close()
    return [s.base_offset for s in snapshot.segments if s.archived_at is not None]


def test_readers_of_another_tier_at_the_url_leave_the_trusted_copy_alone(tmp_path):
    url = f"file://{tmp_path}/tier"
    bases = make_log(tmp_path / "staging", 5)
    _upload(tmp_path / "staging", url, 2)                    # this host archived its first 2 segments
    make_log(tmp_path / "hostB" / "staging", 9, record=b"B" * 100)
    _upload(tmp_path / "hostB" / "staging", f"file://{tmp_path}/tierB")    # another host's, listing more
    copy = open(archive_manifest_path(str(tmp_path / "staging")), "rb").read()
    assert _archived_bases(tmp_path, url) == bases[:2]

    os.rename(tmp_path / "tier", tmp_path / "tier.ours")
    os.rename(tmp_path / "tierB", tmp_path / "tier")         # the URL now reaches host B's tier
    LogArchive(open_tier(url), str(tmp_path / "staging")).manifest()
    _, config = write_config(tmp_path, config_text(tmp_path, policy={"archive": {"url": url}}))
    assert archive_command("status", config, [])["logs"]["staging"].get("error") is None
    verified = archive_command("verify", config, [])["logs"]["staging"]
    assert verified["problems"] and "tier-identity.json" in verified["problems"][0]

    assert open(archive_manifest_path(str(tmp_path / "staging")), "rb").read() == copy
    assert _archived_bases(tmp_path, url) == bases[:2]        # never the segments not uploaded from here


def test_a_proof_made_at_one_url_is_not_trusted_at_another_until_the_tier_proves_itself_there(tmp_path):
    bases = make_log(tmp_path / "staging", 3)
    _upload(tmp_path / "staging", f"file://{tmp_path}/tier", 2)
    shutil.copytree(tmp_path / "tier", tmp_path / "elsewhere")
    moved = f"file://{tmp_path}/elsewhere"
    assert _archived_bases(tmp_path, moved) == []            # confirmed at the old URL only
    LogArchive(open_tier(moved), str(tmp_path / "staging")).confirm()     # the next upload run's
    assert _archived_bases(tmp_path, moved) == bases[:2]
