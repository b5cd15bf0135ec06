"""Hostile clients against a real `retention serve` on loopback: resets mid-answer, malformed and
oversized requests, slow senders, idle connections, a client hanging up on a process whose SIGPIPE
would kill it. After each, the sidecar lives and answers /healthz."""

from __future__ import annotations

import os
import random
import re
import socket
import struct
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import pytest

from retention_helpers import config_text, make_log, set_age, write_config
from sidecar_helpers import Sidecar

HTTP_TIMEOUT = 2.0


ENDPOINTS = [("GET", "/livez"), ("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/metrics"), ("GET", "/status"),
             ("GET", "/plan"), ("GET", "/"), ("POST", "/clean")]


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    bases = make_log(tmp / "staging", 12)
    set_age(tmp / "staging", bases[:10], 7200)
    config_path, _ = write_config(tmp, config_text(tmp, sidecar=True, policy={"files_per_pass": 1},
                                                  service={"log_level": "DEBUG", "http_timeout": f"{HTTP_TIMEOUT}s"}))
    with Sidecar(config_path, cwd=tmp) as s:
        s.wait_ready()
        host, port = urlsplit(s.url).hostname, urlsplit(s.url).port
        s.address = (host, port)
        yield s


def _alive_and_healthy(sidecar) -> None:
    assert sidecar.proc.poll() is None, f"the sidecar exited {sidecar.proc.returncode}:\n{sidecar.log()[-3000:]}"
    status, body = sidecar.get_json("/healthz")
    assert (status, body["status"]) == (200, "ok"), body


def _reset(sock: socket.socket) -> None:
    """Close with a TCP reset (SO_LINGER 0) instead of a FIN."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _request(method: str, path: str, host: str) -> bytes:
    length = "Content-Length: 0\r\n" if method == "POST" else ""
    return f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n{length}\r\n".encode()


def _counts(sidecar) -> dict[tuple[str, int], float]:
    """retention_http_requests_total by (path, code), once the shared /metrics answer (kept up to a
    second) has been recomputed."""
    time.sleep(1.1)
    _, _, body = sidecar.request("GET", "/metrics")
    found = re.findall(r'^retention_http_requests_total\{code="(\d+)",path="([^"]*)"\} (\S+)$',
                       body.decode(), re.M)
    return {(path, int(code)): float(value) for code, path, value in found}


def _by_code(counts: dict[tuple[str, int], float], code: int) -> float:
    return sum(v for (_, c), v in counts.items() if c == code)


def test_50_clients_resetting_mid_answer_on_every_endpoint_leave_it_alive_and_healthy(sidecar):
    host = "%s:%d" % sidecar.address
    rng = random.Random(11)

    def client(method: str, path: str) -> None:
        sock = socket.create_connection(sidecar.address, timeout=10)
        try:
            # several answers pipelined: the reset lands while the later ones are being written
            sock.sendall(_request(method, path, host) * 4)
            if rng.random() < 0.5:
                sock.recv(rng.randint(1, 64))      # the answer has started
        finally:
            _reset(sock)

    for method, path in ENDPOINTS:
        with ThreadPoolExecutor(10) as pool:
            list(pool.map(lambda _: client(method, path), range(50)))
        _alive_and_healthy(sidecar)
    # the sidecar went on counting what it answered
    assert _counts(sidecar)["/status", 200] >= 50


def test_malformed_requests_each_get_an_error_or_a_close_and_the_sidecar_lives(sidecar):
    host = "%s:%d" % sidecar.address
    rng = random.Random(7)
    corpus = {
        "random bytes": (bytes(rng.randrange(256) for _ in range(4096)), {400, None}),
        "NULs": (b"\0" * 2048 + b"\r\n\r\n", {400, None}),
        "NUL in the request line": (b"GET /hea\0lthz HTTP/1.1\r\nHost: x\r\n\r\n", {400, 404}),
        "NUL in a header": (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\0b\r\n\r\n", {400}),
        "100 KB request line": (b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", {431}),
        "200 KB header": (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 200_000 + b"\r\n\r\n", {431}),
        "huge Content-Length": (b"POST /clean HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999\r\n\r\n", {413}),
        "negative Content-Length": (b"POST /clean HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", {400}),
        "unknown method": (_request("BREW", "/status", host), {405}),
        "lowercase method": (_request("get", "/status", host), {400, 405}),
        "path traversal": (_request("GET", "/../../../etc/passwd", host), {400, 404}),
        "encoded path traversal": (_request("GET", "/%2e%2e/%2e%2e/etc/passwd", host), {400, 404}),
        "not HTTP": (b"SSH-2.0-OpenSSH_9.2\r\n\r\n", {400, None}),
        "TLS hello": (bytes.fromhex("16030100a5010000a10303") + os.urandom(160), {400, None}),
        "bad chunked body": (b"POST /clean HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", {400}),
    }
    # with a Host the sidecar answers to (any other is refused with 421 before routing)
    corpus = {name: (data.replace(b"Host: x\r\n", f"Host: {host}\r\n".encode()), expected)
              for name, (data, expected) in corpus.items()}
    before = _counts(sidecar)
    for name, (data, expected) in corpus.items():
        sock = socket.create_connection(sidecar.address, timeout=HTTP_TIMEOUT + 5)
        try:
            try:
                sock.sendall(data)
            except (BrokenPipeError, ConnectionResetError):
                pass           # it answered and closed before the rest arrived
            answer = b""
            try:
                while b"\r\n" not in answer:
                    chunk = sock.recv(4096)
                    if not chunk:
                        break
                    answer += chunk
            except ConnectionResetError:
                pass
        finally:
            sock.close()
        code = int(answer.split()[1]) if answer.startswith(b"HTTP/1.") else None
        assert code in expected, f"{name}: answered {answer[:80]!r}, expected one of {expected}"
        _alive_and_healthy(sidecar)
    # waitress's own refusals (431, 413) are counted like the application's (405)
    after = _counts(sidecar)
    assert {code: _by_code(after, code) - _by_code(before, code) for code in (431, 413, 405)} == \
        {431: 2, 413: 1, 405: 1}
    assert after["other", 431] == _by_code(after, 431)     # no path of theirs becomes a label value
    assert "refused: 431" in sidecar.log() and "refused: 405" in sidecar.log()


def test_idle_and_slow_connections_are_closed_after_http_timeout(sidecar):
    idle = socket.create_connection(sidecar.address, timeout=HTTP_TIMEOUT + 5)
    half = socket.create_connection(sidecar.address, timeout=HTTP_TIMEOUT + 5)
    half.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")        # never finished
    slow = socket.create_connection(sidecar.address, timeout=0.3)
    started = time.monotonic()
    closed = {}
    try:
        # a slow-loris: a header byte every 0.3 s keeps the connection busy, never completes
        slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        while "slow" not in closed and time.monotonic() - started < HTTP_TIMEOUT + 4:
            try:
                slow.sendall(b"X")
                if slow.recv(1) == b"":
                    closed["slow"] = time.monotonic() - started
            except TimeoutError:
                pass
            except (BrokenPipeError, ConnectionResetError):
                closed["slow"] = time.monotonic() - started
        for name, sock in (("idle", idle), ("half", half)):
            assert sock.recv(1) == b"", name                      # closed, no answer
            closed[name] = time.monotonic() - started
    finally:
        for sock in (idle, half, slow):
            sock.close()
    assert set(closed) == {"idle", "half", "slow"}, closed
    for name, after in closed.items():
        # swept at least every http_timeout/4 seconds
        assert HTTP_TIMEOUT - 0.5 <= after <= HTTP_TIMEOUT + 2.0, (name, closed)
    _alive_and_healthy(sidecar)


def test_serve_survives_sigpipe_from_a_client_that_hangs_up_mid_answer(sidecar):
    """A FIN right after the requests: the first answer draws a reset, the next write then raises
    EPIPE, which with SIGPIPE at its default action (as `retention plan | head` needs) kills the
    process with status -13."""
    host = "%s:%d" % sidecar.address
    for _ in range(20):
        sock = socket.create_connection(sidecar.address, timeout=10)
        sock.sendall(_request("GET", "/metrics", host) * 30)
        sock.close()
    time.sleep(0.5)
    _alive_and_healthy(sidecar)
    with open(f"/proc/{sidecar.proc.pid}/status") as f:
        ignored = int(re.search(r"^SigIgn:\s+([0-9a-f]+)$", f.read(), re.M).group(1), 16)
    assert ignored & (1 << (13 - 1)), "SIGPIPE is not ignored in retention serve"
