"""/healthz and /metrics latency while an attacker holds every connection slot with idle sockets.

A real `retention serve` (3 logs, the default `service.max_connections: 500`, `http_timeout: 10s`).
An attacker thread opens IDLE connections that connect and send nothing, and reopens each one the
sidecar closes (the half-open flood of issue 34). Meanwhile this process GETs /healthz and /metrics
on a fresh connection every 50 ms for SECONDS and reports p50, p99 and max (connect to last byte;
a probe that got no answer within 15 s counts as 15 s). Baseline: the same probes with no
attacker, in the same run.

Then a query repeating `&log=NAME` 5,000 times (60 KB, under the 64 KiB request-line limit): one
timed alone, then /metrics timed while three of them run.

Usage: python bench/bench_http_idle_limit.py [IDLE] [SECONDS]   (defaults 500 and 25; loopback only)
"""

from __future__ import annotations

import http.client
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_sidecar_idle import build  # noqa: E402
from http_load import percentile  # noqa: E402

PROBE_TIMEOUT = 15.0


class Attacker:
    """`count` idle connections held open, each reopened as soon as the sidecar closes it."""

    def __init__(self, host: str, port: int, count: int) -> None:
        self.address = (host, port)
        self.count = count
        self.stop = threading.Event()
        self.sockets: list[socket.socket] = []
        self.reopened = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _open(self) -> socket.socket | None:
        try:
            s = socket.create_connection(self.address, timeout=2)
        except OSError:
            return None
        s.setblocking(False)
        return s

    def _run(self) -> None:
        while not self.stop.is_set():
            alive = []
            for s in self.sockets:
                try:
                    if s.recv(1) == b"":
                        s.close()
                        continue
                except BlockingIOError:
                    pass
                except OSError:
                    s.close()
                    continue
                alive.append(s)
            while len(alive) < self.count and not self.stop.is_set():
                s = self._open()
                if s is None:
                    break
                alive.append(s)
                self.reopened += 1
            self.sockets = alive
            self.stop.wait(0.05)

    def __enter__(self) -> Attacker:
        self.thread.start()
        deadline = time.monotonic() + 30
        while len(self.sockets) < self.count and time.monotonic() < deadline:
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(10)
        for s in self.sockets:
            s.close()


def get(host: str, port: int, path: str, timeout: float) -> tuple[int, float]:
    """(status, seconds from connect to the last byte) of a GET on a fresh connection; (0, timeout)
    when it got no answer in time."""
    started = time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        return response.status, time.perf_counter() - started
    except (TimeoutError, OSError):
        return 0, timeout
    finally:
        conn.close()


def probe(host: str, port: int, paths: list[str], seconds: float) -> dict[str, list[float]]:
    latencies: dict[str, list[float]] = {p: [] for p in paths}
    deadline = time.monotonic() + seconds
    i = 0
    while time.monotonic() < deadline:
        path = paths[i % len(paths)]
        i += 1
        status, took = get(host, port, path, PROBE_TIMEOUT)
        if status not in (0, 200):
            raise SystemExit(f"{path}: HTTP {status}")
        latencies[path].append(took)
        time.sleep(max(0.0, 0.05 - took))
    return latencies


def hostile_queries(host: str, port: int, log: str) -> None:
    path = "/offsets?at=2026-01-01T00:00:00Z" + f"&log={log}" * 5000
    status, took = get(host, port, path, 600)
    print(f"/offsets with log={log} 5,000 times: HTTP {status} in {took:.2f} s", flush=True)
    threads = [threading.Thread(target=get, args=(host, port, path, 600)) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    status, took = get(host, port, "/metrics", 600)
    print(f"/metrics during three of them: HTTP {status} in {took * 1000:.1f} ms", flush=True)
    for t in threads:
        t.join()


def report(name: str, latencies: dict[str, list[float]]) -> None:
    for path, values in latencies.items():
        print(f"{name:>9} {path:<8} {len(values):4d} probes: p50 {percentile(values, 0.5) * 1000:8.1f} ms, "
              f"p99 {percentile(values, 0.99) * 1000:8.1f} ms, max {max(values) * 1000:8.1f} ms", flush=True)


def main(argv: list[str]) -> int:
    idle = int(argv[0]) if argv else 500
    seconds = float(argv[1]) if len(argv) > 1 else 25.0
    with tempfile.TemporaryDirectory(prefix="bench-idle-limit-") as tmp:
        config = build(Path(tmp))
        text = config.read_text().replace("service:\n", "service:\n  log_level: INFO\n", 1)
        config.write_text(text)
        with open(Path(tmp) / "sidecar.log", "w") as stderr:
            proc = subprocess.Popen([sys.executable, "-m", "retention.cli", "serve", "--config", str(config)],
                                    stdout=subprocess.DEVNULL, stderr=stderr, cwd=tmp)
        try:
            deadline = time.monotonic() + 30
            match = None
            while match is None and time.monotonic() < deadline:
                match = re.search(r"HTTP on http://([\d.]+):(\d+) ", (Path(tmp) / "sidecar.log").read_text())
                time.sleep(0.1)
            if match is None:
                raise SystemExit("retention serve did not start")
            host, port = match.group(1), int(match.group(2))
            paths = ["/healthz", "/metrics"]
            report("no idle", probe(host, port, paths, 5.0))
            with Attacker(host, port, idle) as attacker:
                under = probe(host, port, paths, seconds)
            report(f"{idle} idle", under)
            print(f"(the attacker opened {attacker.reopened} connections in all)")
            hostile_queries(host, port, "orders")
        finally:
            proc.terminate()
            proc.wait(30)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main(sys.argv[1:]))
