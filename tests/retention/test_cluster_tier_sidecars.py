"""Two real sidecars (one per "host", each with its own local directory for the log) look after one
cluster log on a shared directory tier: one owns the lease and collects an aborted job's staged
objects (audited); the other names the owner in /status and `retention status`, healthy; when the
owner is SIGKILLed, the other takes over once the lease expired by its margin."""

from __future__ import annotations

import signal
import subprocess
import sys

from commitlog.archive import open_tier, versions
from commitlog.archive.lease import newest_term
from commitlog.spark.cluster import commit as cluster_commit
from commitlog.spark.cluster.staging import stage
from retention.audit import read_events
from sidecar_helpers import Sidecar

NAME = "events"


def _config(tmp_path, host: str, tier_url: str):
    root = tmp_path / host
    root.mkdir()
    path = root / "retention.yaml"
    path.write_text(f"""
service:
  listen: 127.0.0.1:0
  audit: {root}/audit.jsonl
logs:
  events:
    path: {root}/logs/{NAME}
policies:
  default:
    archive:
      url: {tier_url}
      cluster: {{interval: 0.5s, lease: 1.5s, grace: 0s, claim_grace: 0s, staged_max_age: 1h}}
""")
    return path, root


def _cluster(sidecar: Sidecar) -> dict:
    return sidecar.get_json("/status")[1].get("cluster", {}).get(NAME) or {}


def test_one_sidecar_owns_the_tier_the_other_names_it_and_takes_over_when_it_dies(tmp_path):
    tier_url = f"file://{tmp_path}/shared"
    tier = open_tier(tier_url)
    versions.mark_cluster(tier, NAME, 0)
    cluster_commit.abort(tier, NAME, "aborted-job", [])
    stage(tier, NAME, "aborted-job", "a0", 4096, [(b"v", b"k")])
    (config_a, root_a), (config_b, root_b) = _config(tmp_path, "host-a", tier_url), _config(tmp_path, "host-b", tier_url)
    with Sidecar(config_a, cwd=root_a) as a:
        a.wait_for(lambda: _cluster(a).get("mine"), what="host-a owns the lease")
        with Sidecar(config_b, cwd=root_b) as b:
            seen = b.wait_for(lambda: _cluster(b).get("owner") and _cluster(b), what="host-b names the owner")
            assert not seen["mine"] and seen["owner"].endswith(f"pid {a.proc.pid}") and seen["until"]
            status, health = b.get_json("/healthz")
            assert status == 200, health
            shown = subprocess.run([sys.executable, "-m", "retention.cli", "status", "--url", b.url],
                                   capture_output=True, text=True, timeout=60).stdout
            assert f"cluster log {NAME}: tier lease held by " in shown and f"pid {a.proc.pid}" in shown
            a.wait_for(lambda: not any(k.startswith(f"{NAME}/staged/") for k in tier.keys(f"{NAME}/")),
                       what="the aborted job's objects collected")
            deleted = [e for e in read_events(str(root_a / "audit.jsonl")) if e.get("event") == "deleted"]
            assert {e["because"] for e in deleted} == {"job-aborted", "job-done"}
            assert not read_events(str(root_b / "audit.jsonl")) or not [
                e for e in read_events(str(root_b / "audit.jsonl")) if e.get("event") == "deleted"]
            a.send(signal.SIGKILL)
            a.wait(10)
            b.wait_for(lambda: _cluster(b).get("mine"), timeout=30, what="host-b takes over")
            assert newest_term(tier, NAME).pid == b.proc.pid
