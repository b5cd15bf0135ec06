"""Shared by the adversary's HTTP probes (tests/adversary/test_http_*.py): a real `retention serve`
on loopback (tests/retention/sidecar_helpers.py) over a log with segments a forced pass would
delete, raw HTTP requests with any Host, and timing of GETs on fresh connections."""

from __future__ import annotations

import contextlib
import http.client
import http.server
import resource
import socket
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "retention"))

from retention_helpers import config_text, make_log, segment_bases, set_age, write_config  # noqa: E402
from sidecar_helpers import Sidecar  # noqa: E402

__all__ = ["CHROMEDRIVER", "CHROMIUM", "Sidecar", "address", "get_timed", "headless_chromium", "page_server",
           "raise_open_files", "raw_request", "reserved_log_sidecar", "segment_bases"]


def reserved_log_sidecar(tmp: Path, *, service: dict | None = None, segments: int = 6) -> tuple[Sidecar, list[int]]:
    """A sidecar (not started) over a log `staging` of `segments` sealed segments, all 2 h old,
    inside a 72 h reserve and with no delete hours: no pass deletes them; a forced one
    (`POST /clean?force=1`) deletes every sealed one. Returns it and the sealed segments' bases."""
    bases = make_log(tmp / "staging", segments)
    set_age(tmp / "staging", bases[:-1], 2 * 3600)
    config_path, _ = write_config(tmp, config_text(tmp, sidecar=True, policy={"reserve": "72h", "files_per_pass": 100},
                                                  service={"log_level": "DEBUG", **(service or {})}))
    return Sidecar(config_path, cwd=tmp), bases[:-1]


def address(sidecar: Sidecar) -> tuple[str, int]:
    parts = urlsplit(sidecar.url)
    return parts.hostname, parts.port


def raw_request(sidecar: Sidecar, method: str, path: str, headers: dict[str, str] | None = None,
                body: bytes = b"", timeout: float = 30.0) -> tuple[int, bytes]:
    """(status, body) of one request with exactly the headers given (Host included: none is added)."""
    host, port = address(sidecar)
    lines = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in (headers or {}).items()),
             f"Content-Length: {len(body)}", "Connection: close", "", ""]
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall("\r\n".join(lines).encode("latin-1") + body)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, content = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), content


def get_timed(sidecar: Sidecar, path: str, *, timeout: float = 30.0) -> tuple[int, float]:
    """(status, seconds from connect to the last byte) of a GET on a fresh connection."""
    host, port = address(sidecar)
    started = time.monotonic()
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
    finally:
        conn.close()
    return response.status, time.monotonic() - started


def raise_open_files(need: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need if hard == resource.RLIM_INFINITY else min(need, hard), hard))


CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


@contextlib.contextmanager
def headless_chromium(*args: str):
    """A Selenium driver of Debian's headless chromium (the driver path is given: Selenium Manager
    never downloads one); `args` are extra command-line switches."""
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--no-proxy-server",
                *args):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


@contextlib.contextmanager
def page_server(html: str):
    """A second HTTP server on loopback (another port than the sidecar's) serving `html` at `/`;
    yields its base URL."""
    body = html.encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
