"""The sidecar's HTTP under load: /metrics throughput and /healthz latency.

1. /metrics requests per second with 3 and with 100 logs. The sidecar's server (waitress,
   `RetentionHTTPServer`) and a bare prometheus-client exporter (`start_http_server`) run in this
   process over the *same* registry of a started `RetentionScheduler` (its first passes done);
   CLIENTS keep-alive clients in a separate process (bench/http_load.py, at nice 10) fetch /metrics for
   ROUND_SECONDS, alternating sidecar and exporter, best of ROUNDS each. Baseline: the exporter.
2. /healthz latency under the load test's load: a real `retention serve` with 3 logs, 32 clients on
   /metrics and /status in another process, 300 idle connections held open; this process probes
   /healthz on a fresh connection every 20 ms for LOAD_SECONDS. Baseline: the same probes against
   the same idle sidecar with no load for 5 s; the two alternate, best p99 of HEALTHZ_ROUNDS each.

Usage: python bench/bench_sidecar_http.py   (about 100 s; loopback only)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from http_load import IdleConnections, percentile, probe  # noqa: E402

from commitlog import CommitLog  # noqa: E402

CLIENTS = 8
ROUNDS = 3
ROUND_SECONDS = 3.0
LOAD_SECONDS = 10.0
HEALTHZ_ROUNDS = 2


def build(tmp: Path, count: int, level: str = "WARNING") -> Path:
    logs = ""
    for n in range(count):
        name = f"log{n:03d}"
        with CommitLog.open(tmp / name, segment_size=64 * 1024, flush="none") as log:
            log.append_batch([b"x" * 1000] * 200)
            log.commit("etl", log.end_offset // 2)
        logs += f"  {name}:\n    path: {tmp / name}\n    segment_size: 64KiB\n"
    config = tmp / f"retention-{count}.yaml"
    config.write_text(textwrap.dedent(f"""
        service:
          listen: 127.0.0.1:0
          audit: {tmp}/audit.jsonl
          log_level: {level}
        logs:
    """) + logs + textwrap.dedent("""
        policies:
          default:
            interval: 1h
            delete_at_hours: []
            reserve: 72h
    """))
    return config


# The clients share the host's two cores with the servers they load (real scrapers run on other
# hosts): below the servers' priority, they take the CPU the servers leave. A command prefix, not a
# preexec_fn (Python run between fork and exec can hang on a lock another thread held).
BELOW = ["nice", "-n", "10"]


def load(url: str, paths: str, clients: int, seconds: float) -> dict:
    out = subprocess.run([*BELOW, sys.executable, str(HERE / "http_load.py"), url, "--paths", paths,
                          "--clients", str(clients), "--seconds", str(seconds)],
                         capture_output=True, text=True, check=True, timeout=seconds + 120).stdout
    result = json.loads(out)
    if result["errors"]:
        raise SystemExit(f"{url}{paths}: {result['errors']} errors: {result['error_samples']}")
    return result


def metrics_throughput(tmp: Path, count: int) -> tuple[float, float, int]:
    from prometheus_client import disable_created_metrics, start_http_server

    from policies import load_config
    from retention.web.server import RetentionHTTPServer
    from retention.scheduling.scheduler import RetentionScheduler

    disable_created_metrics()
    config = load_config(build(tmp, count))
    scheduler = RetentionScheduler(config)
    scheduler.start()
    deadline = time.monotonic() + 120
    while not scheduler.ready and time.monotonic() < deadline:
        time.sleep(0.1)
    sidecar = RetentionHTTPServer(scheduler, config.service)
    sidecar.start()
    exporter, thread = start_http_server(0, addr="127.0.0.1", registry=scheduler.metrics.registry)
    exporter_url = f"http://127.0.0.1:{exporter.server_port}"
    size = len(scheduler.metrics.exposition())
    best = {"sidecar": 0.0, "exporter": 0.0}
    try:
        for _ in range(ROUNDS):
            for name, url in (("sidecar", sidecar.url), ("exporter", exporter_url)):
                rps = load(url, "/metrics", CLIENTS, ROUND_SECONDS)["requests_per_second"]
                best[name] = max(best[name], rps)
    finally:
        exporter.shutdown()
        exporter.server_close()
        sidecar.stop()
        scheduler.stop()
    return best["sidecar"], best["exporter"], size


def healthz_under_load(tmp: Path) -> tuple[list[float], list[float], dict]:
    config = build(tmp, 3, level="INFO")       # the start-up line names the URL
    with open(tmp / "sidecar.log", "w") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "retention.cli", "serve", "--config", str(config)],
                                stdout=subprocess.DEVNULL, stderr=stderr, cwd=tmp)
    try:
        deadline = time.monotonic() + 30
        url = None
        while url is None and time.monotonic() < deadline:
            match = re.search(r"HTTP on (http://\S+) ", (tmp / "sidecar.log").read_text())
            url = match.group(1) if match else time.sleep(0.1)
        if url is None:
            raise SystemExit("retention serve did not start:\n" + (tmp / "sidecar.log").read_text())
        best: dict[str, tuple[float, list[float]]] = {}
        for _ in range(HEALTHZ_ROUNDS):          # interleaved: idle, loaded, idle, loaded
            idle_latencies = probe(url, "/healthz", every=0.02, seconds=5.0)
            idle = IdleConnections(url, 300)
            try:
                loader = subprocess.Popen([*BELOW, sys.executable, str(HERE / "http_load.py"), url, "--paths",
                                           "/metrics,/status", "--clients", "32", "--seconds", str(LOAD_SECONDS)],
                                          stdout=subprocess.PIPE, text=True)
                time.sleep(0.5)
                loaded_latencies = probe(url, "/healthz", every=0.02, seconds=LOAD_SECONDS - 1.0)
                out, _ = loader.communicate(timeout=LOAD_SECONDS + 120)
            finally:
                idle.close()
            result = json.loads(out)
            if result["errors"]:
                raise SystemExit(f"load errors: {result['error_samples']}")
            for name, latencies in (("idle", idle_latencies), ("loaded", loaded_latencies)):
                if name not in best or percentile(latencies, 0.99) < best[name][0]:
                    best[name] = (percentile(latencies, 0.99), latencies)
            if best["loaded"][1] is loaded_latencies:
                best_result = result
        baseline, loaded, result = best["idle"][1], best["loaded"][1], best_result
        return baseline, loaded, result
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> int:
    from retention.service.logsetup import configure_logging
    configure_logging("WARNING")
    with tempfile.TemporaryDirectory(prefix="bench-http-") as tmp:
        for count in (3, 100):
            work = Path(tmp) / f"logs{count}"
            work.mkdir()
            sidecar, exporter, size = metrics_throughput(work, count)
            print(f"/metrics with {count} logs ({size} bytes): sidecar {sidecar:.0f} req/s, "
                  f"bare prometheus-client exporter {exporter:.0f} req/s ({CLIENTS} clients, best of {ROUNDS})")
            print(f"FIGURE metrics_rps_{count}_logs {sidecar:.0f} req/s baseline=prometheus_exporter:"
                  f"{exporter:.0f}req/s ratio={sidecar / exporter:.2f}", flush=True)
        work = Path(tmp) / "healthz"
        work.mkdir()
        baseline, loaded, result = healthz_under_load(work)
        b99, p50, p99 = percentile(baseline, 0.99), percentile(loaded, 0.50), percentile(loaded, 0.99)
        print(f"/healthz under 32 clients on /metrics,/status ({result['requests_per_second']:.0f} req/s) "
              f"and 300 idle connections, {len(loaded)} probes: p50 {p50 * 1000:.1f} ms, p99 "
              f"{p99 * 1000:.1f} ms, max {max(loaded) * 1000:.1f} ms; idle p99 {b99 * 1000:.1f} ms")
        print(f"FIGURE healthz_p99_under_load {p99 * 1000:.1f} ms baseline=idle_p99:{b99 * 1000:.1f}ms "
              f"ratio={p99 / b99:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
