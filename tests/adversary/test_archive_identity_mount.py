"""Probe: a `file://` tier whose mount goes away during a sidecar's life is no empty tier.

Before: the missing manifest read as "nothing archived" and reset the local copy, the next uploads
"succeeded" into the bare mountpoint and local retention evicted them; once the mount was back the
records of those segments were gone, and `retention archive verify` said every object matched.
Now the tier must show the identity it was given at first use: the bare mountpoint cannot, so
uploads and evictions wait (`archive-missing` on /healthz), the local copy of the manifest stays,
and once the mount is back everything resumes with every record readable."""

from __future__ import annotations

import json

import pytest

from archive_identity_helpers import (MountedTier, Sidecar, after_passes, deletions, health, segment_bases,
                                      sidecar_config)

from commitlog import CommitLog
from commitlog.archive import open_tier
from commitlog.layout import archive_manifest_path

RECORD = b"m" * 100          # 33 records to a 4 KiB segment


@pytest.fixture
def mounted():
    try:
        tier = MountedTier()
    except RuntimeError as exc:
        pytest.skip(f"cannot mount here: {exc}")
    yield tier
    tier.close()


def _write(log_dir, segments: int) -> int:
    """Append until `segments` more segments are sealed; returns the log's end offset."""
    with CommitLog.open(log_dir, segment_size=4096, flush="none") as log:
        def sealed() -> int:
            return sum(not s.active for s in log.segments())
        wanted = sealed() + segments
        while sealed() < wanted:
            log.append_batch([RECORD] * 8)
        return log.end_offset


def _sealed(log_dir) -> list[int]:
    return segment_bases(log_dir)[:-1]


def test_an_unmounted_tier_stops_uploads_and_evictions_and_loses_nothing(tmp_path, mounted):
    log_dir = tmp_path / "staging"
    _write(log_dir, 4)
    config = sidecar_config(tmp_path, {"url": mounted.url})
    with Sidecar(config, cwd=tmp_path) as sidecar:
        sidecar.wait_for(lambda: len(segment_bases(log_dir)) == 1, timeout=60, what="archived and evicted")
        listed = json.loads(open(archive_manifest_path(str(log_dir))).read())["segments"]
        assert len(listed) == 4 and all(e["archived"] for e in deletions(tmp_path))

        mounted.unmount()                         # the bare mountpoint stays, empty
        end = _write(log_dir, 6)
        waiting = _sealed(log_dir)
        sidecar.wait_for(lambda: health(sidecar) == (503, [("archive-missing", "staging")]), timeout=60,
                         what="archive-missing on /healthz")
        after_passes(sidecar, 3)                  # expired, once listed: none is evicted
        assert _sealed(log_dir)[:len(waiting)] == waiting
        assert json.loads(open(archive_manifest_path(str(log_dir))).read())["segments"] == listed
        assert len(deletions(tmp_path)) == 4

        mounted.remount()
        sidecar.wait_for(lambda: health(sidecar)[0] == 200, timeout=60, what="healthy again")
        sidecar.wait_for(lambda: len(segment_bases(log_dir)) == 1, timeout=60, what="the rest evicted")
    assert all(e["archived"] for e in deletions(tmp_path))
    with CommitLog.open(log_dir, readonly=True, archive=open_tier(mounted.url)) as log:
        assert [r.offset for r in log.scan()] == list(range(end))
        assert all(r.value == RECORD for r in log.scan())
