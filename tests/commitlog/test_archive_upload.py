"""The upload pass on real logs and tiers (a directory; moto's S3 server on loopback): sealed
segments are archived oldest first and listed in the manifest once verified, the active one is
not, `upload_after` and `limit` hold segments back, a tier that goes down leaves the manifest as
of the last archived segment and the next pass resumes, a corrupted object is reported by name,
and the throttle keeps the average under its cap."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

from commitlog import ArchiveCorruptError, ArchiveError, ArchiveMissingError, CommitLog
from commitlog.archive import LogArchive, Manifest, Throttle, open_tier, upload_sealed
from commitlog.archive.upload import due
from commitlog.layout import archive_manifest_path

from archive_helpers import BUCKET, S3Server

NOW_MS = 1_800_000_000_000


pytestmark = pytest.mark.usefixtures("s3_credentials")


def _log(path: str, records: int = 300) -> list:
    with CommitLog.open(path, segment_size=4096) as log:
        for i in range(records):
            log.append(b"%05d" % i * 10, key=b"k%d" % (i % 7), timestamp_ms=NOW_MS - 1000 + i)
        return log.segments()


def test_sealed_segments_are_archived_verified_and_listed(tier, tmp_path):
    path = str(tmp_path / "log")
    segments = _log(path)
    sealed = [s for s in segments if not s.active]
    assert len(sealed) >= 3 and segments[-1].active
    archive = LogArchive(tier, path)
    done = upload_sealed(archive, segments, now_ms=NOW_MS)
    assert [s.base_offset for s in done] == [s.base_offset for s in sealed]
    manifest = archive.manifest()
    assert manifest.segments == tuple(done) and manifest.end_offset == sealed[-1].end_offset
    for segment, info in zip(done, sealed):
        assert (segment.end_offset, segment.bytes) == (info.end_offset, info.used_bytes)
        assert segment.archived_at_ms == NOW_MS
        assert archive.verify(segment) == []
        with open(info.path, "rb") as f:                  # the object is the segment's bytes
            assert tier.read(archive.key(os.path.basename(info.path))) == f.read(info.used_bytes)
    assert archive.cached_manifest() == manifest          # cached beside the log
    assert upload_sealed(archive, segments, now_ms=NOW_MS + 1) == []   # nothing new


def test_upload_after_and_limit_hold_segments_back(tmp_path):
    path = str(tmp_path / "log")
    segments = _log(path)
    archive = LogArchive(open_tier(f"file://{tmp_path}/archive"), path)
    sealed_s = max(s.mtime for s in segments if not s.active)
    assert upload_sealed(archive, segments, now_ms=int(sealed_s * 1000),
                         upload_after_s=3600) == []
    first = upload_sealed(archive, segments, now_ms=NOW_MS, limit=1)
    assert [s.base_offset for s in first] == [0]
    rest = upload_sealed(archive, segments, now_ms=NOW_MS)
    assert [s.base_offset for s in archive.manifest().segments] == \
        [0] + [s.base_offset for s in rest]


def test_a_tier_down_mid_pass_keeps_the_manifest_and_the_next_pass_resumes(tmp_path):
    server = S3Server().start()
    server.make_bucket()
    path = str(tmp_path / "log")
    segments = _log(path)
    tier = open_tier(f"s3://{BUCKET}/p", endpoint=server.endpoint, region="us-east-1")
    archive = LogArchive(tier, path)

    class KillingThrottle(Throttle):
        """Kills the server as the second segment starts going out (the first is recorded)."""

        def took(self, n: int) -> None:
            super().took(n)
            cached = archive.cached_manifest()
            if server.process is not None and cached is not None and cached.segments:
                server.kill()

    with pytest.raises(ArchiveError, match=f"archive s3://{BUCKET}/p object log/0"):
        upload_sealed(archive, segments, now_ms=NOW_MS, throttle=KillingThrottle(None), manifest_every_s=0)
    assert [s.base_offset for s in archive.cached_manifest().segments] == [0]
    # Back, empty (moto keeps nothing across a restart): not the tier the log archived to, so
    # nothing is reset and nothing uploaded (commitlog.archive.identity) ...
    server.start()
    server.make_bucket()
    with pytest.raises(ArchiveMissingError, match="tier-identity.json"):
        upload_sealed(archive, segments, now_ms=NOW_MS)
    assert [s.base_offset for s in archive.cached_manifest().segments] == [0]
    # ... until the operator says it is a new tier: every sealed segment is archived again.
    assert archive.forget()
    done = upload_sealed(archive, segments, now_ms=NOW_MS)
    assert [s.base_offset for s in done] == [s.base_offset for s in segments if not s.active]
    server.kill()


def test_a_corrupted_object_is_reported_by_name(tmp_path):
    path = str(tmp_path / "log")
    segments = _log(path)
    root = tmp_path / "archive"
    archive = LogArchive(open_tier(f"file://{root}"), path)
    [first, *_] = upload_sealed(archive, segments, now_ms=NOW_MS)
    victim = root / "log" / "00000000000000000000.log"
    data = bytearray(victim.read_bytes())
    data[100] ^= 0xFF
    victim.write_bytes(bytes(data))
    [problem] = archive.verify(first)
    assert problem.startswith("log/00000000000000000000.log: SHA-256 ")
    (root / "log" / "00000000000000000000.index").unlink()
    assert archive.verify(first)[1] == "log/00000000000000000000.index: missing"


def test_a_manifest_that_does_not_parse_is_refused_naming_it(tmp_path):
    path = str(tmp_path / "log")
    _log(path)
    root = tmp_path / "archive"
    archive = LogArchive(open_tier(f"file://{root}"), path)
    (root / "log").mkdir(parents=True)
    for garbage in (b"\x00garbage", json.dumps({"format": 9}).encode(),
                    json.dumps({"format": 1, "log": "log", "start_offset": 0,
                                "segments": [{"base_offset": 1}]}).encode()):
        (root / "log" / "manifest.json").write_bytes(garbage)
        with pytest.raises(ArchiveCorruptError, match=f"archive file://{root} object "
                                                       f"log/manifest.json: not a manifest"):
            archive.manifest()
    assert not os.path.exists(archive_manifest_path(path))   # nothing cached from garbage


def test_the_throttle_keeps_the_average_under_its_cap():
    clock = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += seconds

    throttle = Throttle(1000, clock=lambda: clock[0], sleep=sleep)
    for _ in range(10):
        throttle.took(500)
        assert throttle.sent / max(clock[0], 1e-9) <= 1000 + 1e-6
    assert clock[0] == pytest.approx(5.0)
    unlimited = Throttle(None, clock=lambda: clock[0], sleep=sleep)
    before = len(slept)
    unlimited.took(10**9)
    assert len(slept) == before


def test_an_empty_manifest_is_the_start():
    assert Manifest("log").end_offset == 0 and Manifest("log").holding(0) is None


def test_due_skips_what_is_listed_whole_or_let_go_and_sends_again_a_segment_that_grew_by_a_merge(tmp_path):
    segments = _log(str(tmp_path / "log"))
    sealed = [s for s in segments if not s.active]
    archive = LogArchive(open_tier(f"file://{tmp_path}/archive"), str(tmp_path / "log"))
    upload_sealed(archive, segments[:2], now_ms=NOW_MS)
    manifest = archive.manifest()
    assert due(segments, manifest, now_ms=NOW_MS) == sealed[2:]
    # A compaction merged the first two after the first was uploaded: its listing ends too early.
    merged = replace(segments[0], record_count=segments[0].record_count + segments[1].record_count)
    assert due([merged, *segments[2:]], manifest, now_ms=NOW_MS)[0] == merged
    # Total retention let the first two go: never sent again, though still on the disk.
    assert due(segments, manifest.without_before(sealed[2].end_offset), now_ms=NOW_MS) == sealed[3:]
    # Sealed too recently: nothing from there on.
    assert due(segments, manifest, now_ms=int(sealed[2].mtime * 1000), upload_after_s=60) == []


def _keep_every_third(offset, key, tombstone, marked):
    return None if offset % 3 == 0 else "dead"


def test_a_segment_a_compaction_merged_after_its_parts_were_uploaded_replaces_them_whole(tmp_path):
    """Found by the kill-and-restart run with an archive: two segments uploaded, a compaction
    merged them into the first, and the merged segment's upload listed it beside the second's
    entry, an overlap every later read of the manifest refused (`entries overlap`)."""
    path = str(tmp_path / "log")
    segments = _log(path)
    first, second = segments[0], segments[1]
    archive = LogArchive(open_tier(f"file://{tmp_path}/archive"), path)
    upload_sealed(archive, [second], now_ms=NOW_MS)            # the second went up first
    with CommitLog.open(path) as log:
        log.compact([[first.base_offset, second.base_offset]], _keep_every_third)
        merged = log.segments()[0]
    assert (merged.base_offset, merged.end_offset) == (first.base_offset, second.end_offset)
    done = upload_sealed(archive, [merged], now_ms=NOW_MS + 1)
    assert [s.base_offset for s in done] == [first.base_offset]
    manifest = archive.manifest()                              # read back: no overlap refused
    assert [(s.base_offset, s.end_offset) for s in manifest.segments] == [(first.base_offset, second.end_offset)]
    leftover = archive.key(os.path.basename(second.path))
    assert archive.tier.size(leftover) is None                 # the merged part's objects are gone
    with CommitLog.open(path, readonly=True, archive=archive.tier) as log:
        kept = [r.offset for r in log.scan() if r.offset < second.end_offset]
    assert kept == list(range(0, second.end_offset, 3))
