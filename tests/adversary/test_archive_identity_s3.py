"""Probe: an S3 server restarted empty, without the bucket, is no empty tier.

Before: uploads failed with NoSuchBucket run after run while the local copy of the manifest still
listed the archived segments; the passes evicted every one of them (`"archived": true`), their
records were gone from both tiers, and /healthz stayed 200 with an upload lag of 0. Now the tier
cannot show the identity it was given, so nothing it listed is evicted and /healthz names
`archive-missing`."""

from __future__ import annotations

import pytest

from archive_helpers import BUCKET, CREDENTIALS, S3Server
from archive_identity_helpers import Sidecar, after_passes, deletions, health, segment_bases, sidecar_config

from commitlog import CommitLog
from retention_helpers import make_log, set_age


@pytest.fixture
def server():
    s3 = S3Server().start()
    s3.make_bucket()
    yield s3
    s3.kill()


def test_a_bucket_gone_with_its_server_evicts_nothing_it_listed(tmp_path, server):
    log_dir = tmp_path / "staging"
    bases = make_log(log_dir, 6)
    config = sidecar_config(tmp_path, {"url": f"s3://{BUCKET}/tier", "endpoint": server.endpoint,
                                       "region": "us-east-1"}, policy={"reserve": "1h"})
    with Sidecar(config, cwd=tmp_path, env=CREDENTIALS) as sidecar:
        sidecar.wait_for(lambda: sidecar.get_json("/status")[1]["archive"]["staging"]["archived_segments"] == 6,
                         timeout=60, what="six segments archived")
        server.kill()
        server.start()                            # empty: no bucket, no object
        sidecar.wait_for(lambda: health(sidecar) == (503, [("archive-missing", "staging")]), timeout=60,
                         what="archive-missing on /healthz")
        set_age(log_dir, bases[:6], 2 * 3600)     # expired and (as the local copy says) archived
        after_passes(sidecar, 3)
        assert segment_bases(log_dir) == bases and deletions(tmp_path) == []
        assert health(sidecar)[0] == 503
    with CommitLog.open(log_dir, readonly=True) as log:
        assert [r.offset for r in log.scan()] == list(range(log.end_offset))
