"""DNS rebinding: a page of attacker.example whose name the attacker re-points at 127.0.0.1 reads
the sidecar as its own site (paths, pids, consumer groups), unless the sidecar refuses a Host that
is not its own. Every endpoint answers such a request 421 (Misdirected Request: this server does
not answer for that name), while the names a client on the host uses, and those listed in
`service.allowed_hosts`, work; the CLI keeps working."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys

import pytest

from http_helpers import address, headless_chromium, raw_request, reserved_log_sidecar
from retention.web.admission import CLIENT_HEADER

PATHS = ["/status", "/metrics", "/healthz", "/readyz", "/", "/ui/data", "/plan", "/offsets?at=2026-01-01T00:00:00Z",
         "/no-such-endpoint"]


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory):
    s, _ = reserved_log_sidecar(tmp_path_factory.mktemp("host"), service={"allowed_hosts": ["retention.internal"]})
    with s:
        s.wait_ready()
        yield s


@pytest.mark.parametrize("host", ["attacker.example:{port}", "attacker.example", "127.0.0.1.attacker.example:{port}",
                                  "localhost.attacker.example", "10.1.2.3:{port}", "127.0.0.2:{port}", "[::2]:{port}",
                                  "localhost:{port}:{port}", "::1", "", "retention.internal.evil"])
def test_a_host_that_is_not_the_sidecars_is_refused_with_421_on_every_endpoint(sidecar, host):
    host = host.format(port=address(sidecar)[1])
    for path in PATHS:
        status, body = raw_request(sidecar, "GET", path, {"Host": host})
        assert status == 421, (host, path, status)
        error = json.loads(body)["error"]
        assert "service.allowed_hosts" in error and "pid" not in body.decode()
    status, _ = raw_request(sidecar, "POST", "/clean?force=1", {"Host": host, CLIENT_HEADER: "x"})
    assert status == 421


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LocalHost.:{port}", "[::1]:{port}",
                                  "127.0.0.1", "retention.internal:{port}", "Retention.Internal"])
def test_the_sidecars_own_names_and_allowed_hosts_are_answered(sidecar, host):
    host = host.format(port=address(sidecar)[1])
    for path in PATHS[:-1]:
        status, _ = raw_request(sidecar, "GET", path, {"Host": host})
        assert status == 200, (host, path)


def test_a_request_without_host_is_no_browsers_and_is_answered(sidecar):
    with socket.create_connection(address(sidecar), timeout=30) as sock:
        sock.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.0 200 OK")


def test_the_cli_status_and_clean_still_work_by_address_and_by_localhost(sidecar):
    port = address(sidecar)[1]
    for url in (sidecar.url, f"localhost:{port}"):
        for command in (["status"], ["clean", "--json"]):
            done = subprocess.run([sys.executable, "-m", "retention.cli", *command, "--url", url],
                                  capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, (url, command, done.stdout[-500:], done.stderr[-1000:])


def test_a_browser_on_a_rebound_name_gets_421(sidecar):
    """Chromium told that attacker.example is 127.0.0.1 (as the attacker's DNS would say after the
    rebind): its page on attacker.example:PORT cannot read /status."""
    pytest.importorskip("selenium.webdriver")
    port = address(sidecar)[1]
    with headless_chromium("--host-resolver-rules=MAP attacker.example 127.0.0.1") as browser:
        browser.get(f"http://attacker.example:{port}/status")
        text = browser.find_element("tag name", "body").text
        assert "is not a name this sidecar answers to" in text and '"pid"' not in text, text[:300]
        browser.get(f"http://localhost:{port}/status")
        assert '"pid"' in browser.find_element("tag name", "body").text


def test_a_reload_applies_allowed_hosts_to_the_next_request(tmp_path):
    s, _ = reserved_log_sidecar(tmp_path)
    with s:
        s.wait_ready()
        host = "retention.internal:%d" % address(s)[1]
        assert raw_request(s, "GET", "/healthz", {"Host": host})[0] == 421
        text = s.config_path.read_text()
        s.config_path.write_text(text.replace("service:\n", "service:\n  allowed_hosts: [retention.internal]\n", 1))
        s.send(signal.SIGHUP)
        s.wait_for(lambda: "reload (SIGHUP): applied" in s.log(), what="the reload")
        assert raw_request(s, "GET", "/healthz", {"Host": host})[0] == 200
