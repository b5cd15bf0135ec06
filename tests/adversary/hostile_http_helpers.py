"""Hostile HTTP requests generated from seeds, sent over a raw socket (so nothing is normalised on
the way): random methods, paths, query strings, versions, headers and bodies, built from the
sidecar's real routes and the shapes that break parsers (repeated parameters, bad percent escapes,
NULs, huge or negative Content-Length, chunked bodies that lie, header floods)."""

from __future__ import annotations

import random
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from retention.web.routes import PROBE_PATHS, ROUTES

HEALTH_PATHS = PROBE_PATHS       # /livez, /healthz, /readyz: 503 is their contract
_METHODS = ["GET", "GET", "POST", "POST", "HEAD", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "CONNECT",
            "get", "G\x00ET", "GETT", "X" * 5000, "", "POST /clean"]
_VERSIONS = ["HTTP/1.1", "HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/0.9", "HTTP/1.1x", "", "HTTP/99.99"]
_QUERY_KEYS = ["at", "log", "force", "dry_run", "format", "", "at[]", "%zz", "x" * 300, "\u00e9", "log%00"]
_QUERY_VALUES = ["", "1", "0", "yes", "2", "true\x00", "2024-01-01T00:00:00", "9999-12-31T23:59:59Z", "-1",
                 "now", "%", "%zz", "%00", "x" * 5000, "1e309", "NaN", "../../etc/passwd", "staging", "\ud800"]
_HEADERS = [("Host", "attacker.example"), ("Host", ""), ("Host", "127.0.0.1:1"), ("Origin", "http://evil.example"),
            ("Origin", "null"), ("Content-Type", "application/json"), ("Content-Type", "text/plain; charset=x"),
            ("Authorization", "Bearer "), ("Authorization", "Bearer " + "a" * 9000), ("Authorization", "Basic !!"),
            ("Content-Length", "-1"), ("Content-Length", "99999999999999999999"), ("Content-Length", "abc"),
            ("Content-Length", "5"), ("Transfer-Encoding", "chunked"), ("Transfer-Encoding", "gzip, chunked"),
            ("Connection", "keep-alive"), ("Connection", "close"), ("Expect", "100-continue"),
            ("Accept", "*/*" * 1000), ("X-Forwarded-For", "1.2.3.4"), ("Range", "bytes=-1"), ("Cookie", "a=" * 2000),
            ("X" * 9000, "y"), ("Bad Header", "v"), ("NoColon", None), ("If-None-Match", "\x01\x02")]


@dataclass(frozen=True)
class HostileRequest:
    seed: int
    method: str
    target: str
    raw: bytes

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    def allowed_5xx(self, status: int) -> bool:
        """503 from a health probe (unhealthy, by contract), and 501 for a transfer coding other than
        chunked (RFC 9112 6.1: what the server cannot decode; waitress refuses it before routing)."""
        if status == 503:
            return self.path in HEALTH_PATHS
        return status == 501 and b"Transfer-Encoding: gzip" in self.raw


def _target(rng: random.Random) -> str:
    path = rng.choice(list(ROUTES) + ["/status/", "//status", "/../status", "/%2e%2e/", "/%00", "/ui/",
                                      "/" + "a" * rng.choice([1, 300, 9000]), "*", "http://x/status", "", "/metrics#x"])
    if rng.random() < 0.6:
        pairs = [f"{rng.choice(_QUERY_KEYS)}={rng.choice(_QUERY_VALUES)}" for _ in range(rng.choice([1, 2, 5, 3000]))]
        path += "?" + "&".join(pairs)
    elif rng.random() < 0.2:
        path += rng.choice(["?", "?&&&", "?=", "?force", "?dry_run=1&dry_run=0", "?at=%ff%fe"])
    return path


def _body(rng: random.Random, chunked: bool) -> bytes:
    choice = rng.random()
    if chunked:
        return rng.choice([b"0\r\n\r\n", b"5\r\nhello\r\n0\r\n\r\n", b"zz\r\nx\r\n", b"ffffffffffff\r\n",
                           b"3\r\nab", b"-1\r\n\r\n"])
    if choice < 0.5:
        return b""
    if choice < 0.8:
        return rng.choice([b"{}", b'{"force": true}', b"[" * 5000, b'{"a": ' * 3000, b"\x00" * 100, b"force=1"])
    return rng.randbytes(rng.choice([1, 100, 70_000]))


def hostile_request(seed: int, host: str) -> HostileRequest:
    """One request; deterministic in `seed`. `host` is the sidecar's own HOST:PORT (used half the time)."""
    rng = random.Random(seed)
    method, target, version = rng.choice(_METHODS), _target(rng), rng.choice(_VERSIONS)
    headers = [("Host", host)] if rng.random() < 0.6 else []
    headers += [rng.choice(_HEADERS) for _ in range(rng.choice([0, 1, 2, 4, 200]))]
    chunked = any(name == "Transfer-Encoding" for name, _ in headers)
    body = _body(rng, chunked)
    if body and not chunked and rng.random() < 0.7:
        headers.append(("Content-Length", str(len(body))))
    lines = [f"{method} {target} {version}".rstrip()]
    lines += [name if value is None else f"{name}: {value}" for name, value in headers]
    head = "\r\n".join(lines) + "\r\n\r\n"
    return HostileRequest(seed, method, target, head.encode("utf-8", "surrogatepass") + body)


def send(url: str, request: HostileRequest, *, timeout: float) -> int | None:
    """Send `request` raw and half-close; the status code of the answer, or None when the server
    closed without one (a refusal it is allowed to make for a request it cannot parse)."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout) as sock:
        try:
            sock.sendall(request.raw)
            sock.shutdown(socket.SHUT_WR)
        except OSError:          # the server refused early and reset the connection: no answer
            return None
        answer = b""
        try:
            while len(answer) < 64 and (chunk := sock.recv(4096)):
                answer += chunk
        except ConnectionResetError:
            pass
    if not answer.startswith(b"HTTP/"):
        return None
    fields = answer.split(b" ", 2)
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None
