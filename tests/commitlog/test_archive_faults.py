"""The archive tier's hostile paths on real filesystems: a directory tier on a full disk, and a
log directory mounted read-only (its manifest copy cannot be written) read across both tiers."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from commitlog import ArchiveError, CommitLog
from commitlog.archive import LogArchive, open_archive, open_tier, upload_sealed


def _log(path: str, records: int = 300) -> list:
    with CommitLog.open(path, segment_size=64 << 10, flush="none") as log:
        for i in range(records):
            log.append(os.urandom(900), timestamp_ms=1_700_000_000_000 + i)
        return [tuple(r) for r in log.scan()]


@pytest.mark.parametrize("small_fs", [("tmpfs", 256 << 10)], indirect=True)
def test_a_directory_tier_on_a_full_disk_fails_naming_the_object_and_leaves_nothing_half_written(small_fs, tmp_path):
    path = str(tmp_path / "log")
    _log(path)
    tier = open_tier(f"file://{small_fs}/archive")
    archive = LogArchive(tier, path)
    with CommitLog.open(path, readonly=True) as log:
        sealed = [s for s in log.segments() if not s.active]
        with pytest.raises(ArchiveError, match=r"object log/\d{20}\.(log|index): No space left on device"):
            upload_sealed(archive, sealed, now_ms=int(time.time() * 1000), manifest_every_s=0)
    left = sorted(os.listdir(os.path.join(small_fs, "archive", "log")))
    assert not [name for name in left if name.endswith(".part")], left      # no temporary file left
    listed = archive.manifest().segments
    assert listed and all(f"{s.base_offset:020d}.log" in left for s in listed)   # what is listed is whole
    assert all(archive.verify(s) == [] for s in listed)


@pytest.mark.parametrize("small_fs", [("tmpfs", 4 << 20)], indirect=True)
def test_a_read_only_log_directory_reads_across_both_tiers_without_its_manifest_copy(small_fs, tmp_path):
    path = os.path.join(small_fs, "log")
    written = _log(path)
    tier = open_tier(f"file://{tmp_path}/archive")
    with CommitLog.open(path, readonly=True) as log:
        upload_sealed(LogArchive(tier, path), log.segments()[:2], now_ms=int(time.time() * 1000))
        log.remove_head()
    os.unlink(os.path.join(path, "archive-manifest.json"))
    result = subprocess.run(["mount", "-o", "remount,ro", small_fs], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot remount read-only here: {result.stderr.strip()}")
    try:
        with CommitLog.open(path, readonly=True, archive=tier) as log:
            assert [tuple(r) for r in log.scan()] == written
        assert LogArchive(tier, path).manifest().segments          # the copy could not be written: no error
        assert not os.path.exists(os.path.join(path, "archive-manifest.json"))
        with open_archive(tier.url, "log") as log:
            assert tuple(log.read(0)) == written[0]
    finally:
        subprocess.run(["mount", "-o", "remount,rw", small_fs], check=False)
