"""A tier proves it is the log's (commitlog.archive.identity): the identity object written at first
use and remembered here, a tier gone or replaced or without its manifest refused (nothing reset),
and what eviction may trust of the local copy."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

from commitlog import ArchiveMissingError, CommitLog, UnsafeLogFileError
from commitlog.archive import LogArchive, open_tier, upload_sealed
from commitlog.archive import identity
from commitlog.archive.identity import IDENTITY_KEY, ArchiveState, BootMark, read_state, trusted_manifest, write_state
from commitlog.layout import archive_manifest_path, archive_state_path

NOW_MS = 1_800_000_000_000


def _archived(tmp_path) -> tuple[LogArchive, list]:
    path = str(tmp_path / "log")
    with CommitLog.open(path, segment_size=4096) as log:
        log.append_batch([b"x" * 100] * 100)
        segments = log.segments()
    archive = LogArchive(open_tier(f"file://{tmp_path}/tier"), path)
    upload_sealed(archive, segments, now_ms=NOW_MS)
    return archive, segments


def test_first_use_writes_the_identity_and_remembers_it_with_the_confirmation(tmp_path):
    archive, _ = _archived(tmp_path)
    state = read_state(archive.log_dir)
    shown = json.loads((tmp_path / "tier" / "log" / IDENTITY_KEY).read_text())["tier"]
    assert state.tier == shown and state.missing is None and state.confirmed_at_ms > NOW_MS - 10 ** 11
    assert archive.confirm().segments == archive.cached_manifest().segments
    assert read_state(archive.log_dir).confirmed_at_ms >= state.confirmed_at_ms


def test_a_tier_gone_is_missing_and_resets_nothing_until_it_is_back(tmp_path):
    archive, segments = _archived(tmp_path)
    copy = open(archive_manifest_path(archive.log_dir), "rb").read()
    (tmp_path / "tier").rename(tmp_path / "away")               # an unmounted tier: empty
    for attempt in (lambda: archive.confirm(), lambda: upload_sealed(archive, segments, now_ms=NOW_MS)):
        with pytest.raises(ArchiveMissingError, match=f"no {IDENTITY_KEY}, which it had"):
            attempt()
    assert not (tmp_path / "tier").exists()                     # nothing written into it
    assert open(archive_manifest_path(archive.log_dir), "rb").read() == copy
    assert "which it had" in read_state(archive.log_dir).missing
    assert archive.doubt() is not None
    (tmp_path / "away").rename(tmp_path / "tier")
    assert len(archive.confirm().segments) == len(archive.cached_manifest().segments) > 0
    assert read_state(archive.log_dir).missing is None and archive.doubt() is None


def test_another_tier_or_a_manifest_gone_is_missing_too(tmp_path):
    archive, _ = _archived(tmp_path)
    (tmp_path / "tier" / "log" / IDENTITY_KEY).write_text(json.dumps({"tier": "someone-else"}))
    with pytest.raises(ArchiveMissingError, match=f"the tier's {IDENTITY_KEY} is 'someone-else'"):
        archive.confirm()
    (tmp_path / "tier" / "log" / IDENTITY_KEY).unlink()
    archive.forget()                                # as met for the first time: its identity is new ...
    archive._write_cache(archive.manifest().to_json())
    (tmp_path / "tier" / "log" / "manifest.json").unlink()
    with pytest.raises(ArchiveMissingError, match="has no manifest, while this host's copy lists"):
        archive.confirm()                 # ... but its manifest is gone while the copy lists


def test_a_manifest_that_lost_listed_segments_contradicts_the_local_copy(tmp_path):
    archive, _ = _archived(tmp_path)
    older = archive.cached_manifest()
    shorter = replace(older, segments=older.segments[1:])      # an older or another manifest
    (tmp_path / "tier" / "log" / "manifest.json").write_bytes(shorter.to_json())
    with pytest.raises(ArchiveMissingError, match=f"no longer lists 1 segments .* offset {older.segments[0].base_offset}"):
        archive.confirm()
    assert archive.manifest() == shorter                        # a reader sees the tier's ...
    assert archive.cached_manifest() == older                   # ... and the copy stays
    # Total retention's own removal moves the start past what it removed: no contradiction.
    expired = older.without_before(older.segments[0].end_offset)
    (tmp_path / "tier" / "log" / "manifest.json").write_bytes(expired.to_json())
    assert archive.confirm() == expired


def test_a_manifest_rewrite_is_refused_once_the_mount_is_gone(tmp_path):
    archive, _ = _archived(tmp_path)
    manifest = archive.confirm()
    (tmp_path / "tier").rename(tmp_path / "away")
    with pytest.raises(ArchiveMissingError):
        archive.write_manifest(manifest)
    assert not (tmp_path / "tier").exists()


def test_eviction_trusts_a_recent_confirmation_less_the_segments_without_objects(tmp_path):
    archive, _ = _archived(tmp_path)
    url, at = archive.tier.url, BootMark("boot-1", 500.0)
    copy = archive.cached_manifest()
    state = identity.confirmed(read_state(archive.log_dir), "id", url, NOW_MS, at)
    assert trusted_manifest(copy, state, now=BootMark("boot-1", 509.0), within_s=10, url=url)[0] == copy
    stale, why = trusted_manifest(copy, state, now=BootMark("boot-1", 511.0), within_s=10, url=url)
    assert stale is None and "11s ago" in why
    assert trusted_manifest(copy, ArchiveState(), now=at, within_s=10, url=url)[0] is None
    assert trusted_manifest(copy, replace(state, missing="gone"), now=at, within_s=10, url=url) == (None, "gone")
    first = copy.segments[0].base_offset
    kept, _ = trusted_manifest(copy, replace(state, unconfirmed=(first,)), now=at, within_s=10, url=url)
    assert kept.find(first) is None and len(kept.segments) == len(copy.segments) - 1


@pytest.mark.parametrize("now, url, why", [
    (BootMark("boot-2", 501.0), None, "since it booted"),            # another boot: not recent
    (None, None, "since it booted"),                                 # no boot clock to age it on
    (BootMark("boot-1", 499.0), None, "since it booted"),            # a boot clock that went back
    (BootMark("boot-1", 501.0), "file:///elsewhere", "not at file:///elsewhere"),   # another URL
])
def test_a_proof_from_another_boot_or_at_another_url_is_not_trusted(tmp_path, now, url, why):
    archive, _ = _archived(tmp_path)
    state = identity.confirmed(read_state(archive.log_dir), "id", archive.tier.url, NOW_MS, BootMark("boot-1", 500.0))
    found = state.trusted(now, 10, url or archive.tier.url)
    assert why in found and not state.up(now, 10, url or archive.tier.url)


def test_a_confirmation_records_the_boot_clock_and_a_state_without_it_is_not_recent(tmp_path):
    archive, _ = _archived(tmp_path)
    state, now = read_state(archive.log_dir), BootMark.now()
    assert (state.confirmed_boot, state.url) == (now.boot, archive.tier.url)
    assert 0 <= now.uptime - state.confirmed_uptime < 60 and state.up(now, 60, archive.tier.url)
    write_state(archive.log_dir, replace(state, confirmed_boot=None, confirmed_uptime=None))   # an older host's
    assert "since it booted" in read_state(archive.log_dir).trusted(now, 60, archive.tier.url)


def test_a_planted_symlink_at_the_state_is_not_followed(tmp_path):
    archive, _ = _archived(tmp_path)
    victim = tmp_path / "victim"
    victim.write_text("keep")
    os.symlink(victim, archive_state_path(archive.log_dir) + ".tmp")
    with pytest.raises(UnsafeLogFileError, match="archive-state.json.tmp"):
        write_state(archive.log_dir, read_state(archive.log_dir))
    assert victim.read_text() == "keep"
