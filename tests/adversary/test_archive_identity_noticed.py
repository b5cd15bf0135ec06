"""Probes: what a sidecar must notice of its tier without waiting for a run to end or a reader
to fail.

- A hung S3 server (accepting, never answering): the upload lag was measured when a run ended, so
  it stayed 0 and /healthz green for as long as the stuck run lasted (boto3's timeouts and
  retries: minutes). Now it is measured from the oldest due segment before the tier is asked, and
  grows while the run hangs.
- An object deleted on the tier was found by readers and `retention archive verify`, never by the
  sidecar. Now each upload run asks the tier for a bounded number of listed objects and reports
  the missing ones (`archive-missing`)."""

from __future__ import annotations

import os

from archive_helpers import BUCKET, CREDENTIALS, TcpProxy
from archive_identity_helpers import Sidecar, health, segment_bases, sidecar_config

from retention_helpers import make_log, set_age


def test_a_hung_s3_server_shows_as_upload_lag_while_the_run_hangs(tmp_path, s3):
    bases = make_log(tmp_path / "staging", 3)
    set_age(tmp_path / "staging", bases[:3], 2 * 3600)
    proxy = TcpProxy(s3.port)
    proxy.hang()
    config = sidecar_config(tmp_path, {"url": f"s3://{BUCKET}/{tmp_path.name}", "endpoint": proxy.endpoint,
                                       "region": "us-east-1", "lag_unhealthy": "5s"}, policy={"reserve": "1h"})
    try:
        with Sidecar(config, cwd=tmp_path, env=CREDENTIALS) as sidecar:
            # The first run is stuck on its first request (30 s read timeout, three tries): well
            # before it ends, the lag says so.
            sidecar.wait_for(lambda: health(sidecar) == (503, [("archive-lagging", "staging")]), timeout=25,
                             what="archive-lagging while the run hangs")
            lag = sidecar.get_json("/status")[1]["archive"]["staging"]["lag_seconds"]
            assert lag > 2 * 3600 - 60
            assert "in a row" not in sidecar.log()      # no run has ended yet (nor failed)
    finally:
        proxy.close()


def test_an_object_deleted_on_the_tier_is_noticed_and_reported(tmp_path):
    log_dir = tmp_path / "staging"
    make_log(log_dir, 4)
    tier_dir = tmp_path / "tier"
    config = sidecar_config(tmp_path, {"url": f"file://{tier_dir}"})
    with Sidecar(config, cwd=tmp_path) as sidecar:
        sidecar.wait_for(lambda: len(segment_bases(log_dir)) == 1, timeout=60, what="archived and evicted")
        assert health(sidecar)[0] == 200
        os.unlink(tier_dir / "staging" / f"{33:020d}.log")
        sidecar.wait_for(lambda: health(sidecar) == (503, [("archive-missing", "staging")]), timeout=30,
                         what="archive-missing on /healthz")
        message = sidecar.get_json("/healthz")[1]["details"][0]["message"]
        assert "[33]" in message
        assert f"staging/{33:020d}.log: missing" in sidecar.log()
