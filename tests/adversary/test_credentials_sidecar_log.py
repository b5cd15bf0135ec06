"""Probe: at `log_level: TRACE` (troubleshooting recommends it) botocore's request dumps put the
access key id, the session token and the signatures in the sidecar's log. No level logs them: a
real sidecar at TRACE, uploading to and reading from an S3 tier on moto's server with known fake
credentials, leaves none of them in its log."""

from __future__ import annotations

import boto3

from archive_helpers import BUCKET
from credentials_helpers import CREDENTIALS, leaks
from retention_helpers import config_text, make_log, set_age, write_config
from sidecar_helpers import Sidecar


def _archived(server, prefix: str) -> list[str]:
    client = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    return [o["Key"] for o in client.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", ())]


def test_a_sidecar_at_trace_with_an_s3_tier_never_logs_a_credential(tmp_path, s3):
    bases = make_log(tmp_path / "staging", 4)
    set_age(tmp_path / "staging", bases[:4], 3 * 3600)
    prefix = "creds"
    path, _ = write_config(tmp_path, config_text(tmp_path, sidecar=True, service={"log_level": "TRACE"},
                                                 policy={"reserve": "1s", "archive": {
                                                     "url": f"s3://{BUCKET}/{prefix}", "endpoint": s3.endpoint,
                                                     "region": "us-east-1", "interval": "1s"}}))
    with Sidecar(path, cwd=tmp_path, env=CREDENTIALS) as sidecar:
        sidecar.wait_for(lambda: sum(k.endswith(".log") for k in _archived(s3, prefix)) >= 4,
                         what="four segments archived", timeout=60)
        sidecar.request("POST", "/clean?force=1")          # a pass: reads the manifest, evicts
        sidecar.wait_for(lambda: "| DEBUG" in sidecar.log() and "archive" in sidecar.log(),
                         what="the sidecar's own DEBUG lines about the archive")
        log = sidecar.log()
    assert leaks(log) == [], leaks(log)
