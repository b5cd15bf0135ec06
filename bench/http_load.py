"""HTTP load and probe tools for the sidecar's load test and benchmark (loopback only, bounded).

As a script (its own process, so its threads do not compete with the measuring process's):

    python bench/http_load.py URL --paths /metrics,/status --clients 32 --seconds 10

runs CLIENTS threads, each with one keep-alive connection fetching the PATHS in turn for SECONDS,
and prints one JSON line: requests, errors (with a few samples), requests per second.

Imported: `IdleConnections` holds connections open without sending anything, and `probe()` times a
GET on a fresh connection each time (as a liveness probe does).
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import sys
import threading
import time
from urllib.parse import urlsplit

__all__ = ["IdleConnections", "percentile", "probe", "run_load"]


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    if not (host.startswith("127.") or host in ("localhost", "::1")):
        raise SystemExit(f"http_load: {url}: loopback addresses only")
    return host, parts.port or 80


def run_load(url: str, paths: list[str], clients: int, seconds: float) -> dict:
    host, port = _host_port(url)
    lock = threading.Lock()
    totals = {"requests": 0, "errors": 0, "error_samples": []}
    deadline = time.monotonic() + seconds

    def client(index: int) -> None:
        done = errors = 0
        samples = []
        conn = http.client.HTTPConnection(host, port, timeout=30)
        i = index
        while time.monotonic() < deadline:
            path = paths[i % len(paths)]
            i += 1
            try:
                conn.request("GET", path)
                response = conn.getresponse()
                response.read()
                if response.status != 200:
                    raise RuntimeError(f"{path}: HTTP {response.status}")
                done += 1
            except Exception as exc:  # noqa: BLE001 (counted and reported, the client goes on)
                errors += 1
                if len(samples) < 3:
                    samples.append(f"{path}: {type(exc).__name__}: {exc}")
                conn.close()
                conn = http.client.HTTPConnection(host, port, timeout=30)
        conn.close()
        with lock:
            totals["requests"] += done
            totals["errors"] += errors
            totals["error_samples"].extend(samples[: max(0, 5 - len(totals["error_samples"]))])

    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 60)
    elapsed = time.monotonic() - started
    totals["seconds"] = round(elapsed, 3)
    totals["requests_per_second"] = round(totals["requests"] / elapsed, 1)
    return totals


class IdleConnections:
    """`count` TCP connections to `url` that send nothing; `closed_by_server()` counts those the
    server has closed (a zero-byte read or a reset)."""

    def __init__(self, url: str, count: int) -> None:
        host, port = _host_port(url)
        self.sockets = []
        for _ in range(count):
            s = socket.create_connection((host, port), timeout=10)
            s.setblocking(False)
            self.sockets.append(s)
        self.opened_at = time.monotonic()

    def closed_by_server(self) -> int:
        closed = 0
        for s in self.sockets:
            try:
                if s.recv(1) == b"":
                    closed += 1
            except BlockingIOError:
                pass
            except OSError:
                closed += 1
        return closed

    def close(self) -> None:
        for s in self.sockets:
            s.close()


def probe(url: str, path: str, *, every: float, seconds: float, timeout: float = 10.0) -> list[float]:
    """GET `path` on a new connection every `every` seconds for `seconds`; the latencies in
    seconds (connect to last byte). A failed or non-200 probe raises."""
    host, port = _host_port(url)
    latencies = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = time.perf_counter()
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            response.read()
        finally:
            conn.close()
        latencies.append(time.perf_counter() - started)
        if response.status != 200:
            raise AssertionError(f"{path}: HTTP {response.status}")
        time.sleep(max(0.0, every - (time.perf_counter() - started)))
    return latencies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--paths", default="/metrics,/status")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args(argv)
    if not 0 < args.seconds <= 600 or not 0 < args.clients <= 512:
        parser.error("--seconds must be in (0, 600] and --clients in (0, 512]")
    print(json.dumps(run_load(args.url, args.paths.split(","), args.clients, args.seconds)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
