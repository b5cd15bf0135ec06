"""An idle sidecar watching 3 logs: resident memory and CPU over 60 s.

A real `retention serve` watches three logs (default policy: a pass every 10 s, a disk check every
second, nothing to delete). Over BENCH_SECONDS (default 60) it is sampled with psutil: the largest
resident set size and the CPU time used divided by the wall time.

Baseline, measured in the same run and the same way: a bare `python -c 'import time;
time.sleep(60)'` of the same interpreter, started alongside. Targets: RSS <= 60 MB, CPU <= 1 %.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from pathlib import Path

import psutil

from commitlog import CommitLog


def build(tmp: Path) -> Path:
    logs = ""
    for name in ("orders", "payments", "clicks"):
        with CommitLog.open(tmp / name, segment_size=256 * 1024, flush="none") as log:
            for _ in range(4):
                log.append_batch([os.urandom(1000) for _ in range(256)])
            log.commit("etl", log.end_offset // 2)
        logs += f"  {name}:\n    path: {tmp / name}\n    segment_size: 256KiB\n"
    return sidecar_config(tmp, logs)


def sidecar_config(root: Path, logs: str) -> Path:
    """`root/retention.yaml`: the sidecar on a free loopback port, the `logs:` entries given, and
    the default policy (a pass every 10 s, nothing due for deletion)."""
    config = root / "retention.yaml"
    config.write_text(textwrap.dedent(f"""
        service:
          listen: 127.0.0.1:0
          audit: {root}/audit.jsonl
        logs:
    """) + logs + textwrap.dedent("""
        policies:
          default:
            interval: 10s
            delete_at_hours: [4]
            reserve: 72h
    """))
    return config


def sample(procs: dict[str, psutil.Process], seconds: float,
           every: float = 1.0) -> dict[str, tuple[float, float]]:
    """name -> (max RSS in MB, CPU % of one core) over `seconds`, RSS read every `every` seconds."""
    start_cpu = {n: sum(p.cpu_times()[:2]) for n, p in procs.items()}
    peak = {n: 0.0 for n in procs}
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        for n, p in procs.items():
            peak[n] = max(peak[n], p.memory_info().rss / 1e6)
        time.sleep(every)
    wall = time.monotonic() - t0
    return {n: (peak[n], 100 * (sum(p.cpu_times()[:2]) - start_cpu[n]) / wall) for n, p in procs.items()}


def main() -> int:
    seconds = float(os.environ.get("BENCH_SECONDS", "60"))
    tmp = Path(tempfile.mkdtemp(prefix="bench-idle-"))
    err = tmp / "sidecar.log"
    sidecar = subprocess.Popen([sys.executable, "-m", "retention.cli", "serve", "--config", str(build(tmp))],
                               cwd=tmp, stdout=subprocess.DEVNULL, stderr=open(err, "w"))
    baseline = None
    try:
        deadline = time.monotonic() + 20
        url = None
        while url is None and time.monotonic() < deadline:
            match = re.search(r"HTTP on (http://\S+) ", err.read_text())
            url = match.group(1) if match else None
            time.sleep(0.1)
        if url is None:
            raise RuntimeError(f"sidecar did not start:\n{err.read_text()}")
        with urllib.request.urlopen(url + "/status", timeout=10) as r:   # one request, like a probe
            assert r.status == 200
        time.sleep(3)                                    # past start-up and the first passes
        baseline = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds + 5})"])
        time.sleep(0.5)
        figures = sample({"sidecar": psutil.Process(sidecar.pid), "baseline": psutil.Process(baseline.pid)},
                         seconds)
        with urllib.request.urlopen(url + "/healthz", timeout=10) as r:
            assert r.status == 200
    finally:
        sidecar.send_signal(signal.SIGTERM)
        sidecar.wait(timeout=20)
        if baseline is not None:
            baseline.kill()
            baseline.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    rss, cpu = figures["sidecar"]
    base_rss, base_cpu = figures["baseline"]
    print(f"over {seconds:.0f} s: baseline `python -c 'import time; time.sleep(...)'`: RSS {base_rss:.1f} MB, "
          f"CPU {base_cpu:.3f} %")
    print(f"idle sidecar watching 3 logs: RSS {rss:.1f} MB (target <= 60 MB), CPU {cpu:.3f} % (target <= 1 %)")
    print(f"FIGURE idle_rss {rss:.1f} MB baseline=bare_python:{base_rss:.1f}MB ratio={rss / base_rss:.2f}")
    # CPU times tick in 10 ms: a sleeping baseline often shows 0; count it as at least one tick.
    floor = max(base_cpu, 100 * 0.01 / seconds)
    print(f"FIGURE idle_cpu {cpu:.3f} % baseline=bare_python:{base_cpu:.3f}% ratio={cpu / floor:.1f}")
    print("targets met" if rss <= 60 and cpu <= 1.0 else "TARGET MISSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
