"""Hostile HTTP against a real sidecar subprocess: generated requests (hostile_http_helpers) never get
a 5xx other than 503 from a health probe (or 501 for a transfer coding it cannot decode), never put a
traceback in its log, and leave it alive and answering. `make test` sends BRIEF_REQUESTS fixed seeds; `-m fuzz` sends HTTP_SEEDS=<first>:<count>
(default 0:5000)."""

from __future__ import annotations

import os
import urllib.parse

import pytest

from hostile_http_helpers import hostile_request, send
from retention_helpers import config_text, make_log, write_config
from sidecar_helpers import Sidecar

BRIEF_REQUESTS = range(150)


def _storm(tmp_path, seeds) -> None:
    make_log(tmp_path / "staging", 3)
    config_path, _ = write_config(tmp_path, config_text(tmp_path, sidecar=True, service={"http_timeout": "2s"}))
    with Sidecar(config_path, cwd=tmp_path) as s:
        s.wait_ready()
        host = urllib.parse.urlsplit(s.url).netloc
        findings = []
        for seed in seeds:
            request = hostile_request(seed, host)
            status = send(s.url, request, timeout=30)
            if status is not None and status >= 500 and not request.allowed_5xx(status):
                findings.append(f"seed {seed}: {status} for {request.raw[:300]!r}")
            assert s.proc.poll() is None, f"the sidecar died at seed {seed}: {request.raw[:300]!r}\n{s.log()[-3000:]}"
        assert not findings, "\n".join(findings)
        assert "Traceback" not in s.log(), s.log()[-5000:]
        assert s.request("GET", "/healthz")[0] in (200, 503)
        assert s.request("GET", "/status")[0] == 200
        assert s.stop() == 0


def test_generated_hostile_requests_get_no_5xx_and_leave_the_sidecar_alive(tmp_path):
    _storm(tmp_path, BRIEF_REQUESTS)


@pytest.mark.fuzz
@pytest.mark.timeout(0)     # as long as the seeds take; each case has its own bound
def test_fuzz_hostile_http(tmp_path):
    first, _, count = os.environ.get("HTTP_SEEDS", "0:5000").partition(":")
    _storm(tmp_path, range(int(first), int(first) + int(count)))
