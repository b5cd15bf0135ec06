"""One host, many logs: a pass over 100 and over 1,000 logs, and the idle sidecar watching them.

Each log holds 10 sealed 4 KiB segments, last written an hour ago, and an active one; the policy is
the default (interval 10s, reserve 72h, delete hour 4): nothing to delete. Printed side by side for
100 and 1,000 logs:

- pass: one cleanup pass over every log, as the sidecar's interval job runs it (plan, execute,
  the per-log status and gauges), in this process, best of 5 after a first pass that opens the logs;
  the ratio 1,000 / 100 shows whether a pass grows at most linearly (target: within 10x, 1,000 logs
  under 300 ms);
- idle sidecar: a real `retention serve` over the same logs, sampled with psutil for BENCH_SECONDS
  (default 30) after its first passes: largest RSS and CPU time over wall time (target with 1,000
  logs: under 100 MB and 2 % of a core).

Baseline, measured in the same run: a bare `os.scandir` of every log directory (the least a pass
must do), and a bare `python -c 'import time; time.sleep(...)'` for memory and CPU.
`--profile N` prints a cProfile of one pass over N logs instead.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil
from loguru import logger

from commitlog import CommitLog
from policies import load_config
from retention import RetentionScheduler

from bench_sidecar_idle import sample, sidecar_config

SEGMENTS = 10


def build_template(root: Path) -> Path:
    """root/template: a log of SEGMENTS sealed 4 KiB segments and an active one, read to its end by
    group etl, every file last written an hour ago (nothing due under the default policy)."""
    template = root / "template"
    with CommitLog.open(template, segment_size=4096, flush="none") as log:
        while len(log.segments()) < SEGMENTS + 1:
            log.append_batch([b"r" * 100] * 16)
        log.commit("etl", log.end_offset)
    old = time.time() - 3600
    for path in template.iterdir():
        if not path.name.startswith("."):
            os.utime(path, (old, old))
    return template


def build(root: Path, count: int) -> Path:
    """`count` logs under root, and a configuration naming them; returns the configuration."""
    template = build_template(root)
    logs = ""
    for i in range(count):
        name = f"log{i:04d}"
        shutil.copytree(template, root / name, copy_function=shutil.copy2,
                        ignore=shutil.ignore_patterns(".*"))
        logs += f"  {name}:\n    path: {root / name}\n    segment_size: 4KiB\n"
    shutil.rmtree(template)
    return sidecar_config(root, logs)




def pass_time(config_path: Path, rounds: int = 5) -> float:
    """Best wall time of one interval pass over every log, recording included (the interval job)."""
    config = load_config(config_path)
    scheduler = RetentionScheduler(config, watch_rolls=False)
    try:
        scheduler.passes.interval("default")        # opens every log
        best = float("inf")
        for _ in range(rounds):
            t = time.perf_counter()
            scheduler.passes.interval("default")
            best = min(best, time.perf_counter() - t)
        return best
    finally:
        scheduler.stop()


def bare_scandir(root: Path) -> float:
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for d in root.iterdir():
            if d.is_dir():
                with os.scandir(d) as it:
                    for _ in it:
                        pass
        best = min(best, time.perf_counter() - t)
    return best


def idle_sidecar(config_path: Path, seconds: float) -> tuple[float, float, float, float]:
    """(sidecar max RSS MB, sidecar CPU %, baseline RSS MB, baseline CPU %) over `seconds`."""
    err = config_path.parent / "sidecar.log"
    sidecar = subprocess.Popen([sys.executable, "-m", "retention.cli", "serve", "--config", str(config_path)],
                               cwd=config_path.parent, stdout=subprocess.DEVNULL, stderr=open(err, "w"))
    baseline = None
    try:
        deadline = time.monotonic() + 120
        url = None
        while time.monotonic() < deadline:
            match = re.search(r"HTTP on (http://\S+) ", err.read_text())
            if match:
                url = match.group(1)
                try:
                    with urllib.request.urlopen(url + "/readyz", timeout=5) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
            time.sleep(0.2)
        else:
            raise RuntimeError(f"sidecar not ready:\n{err.read_text()[-2000:]}")
        time.sleep(12)                       # past start-up and a second interval pass
        baseline = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds + 5})"])
        time.sleep(0.5)
        figures = sample({"sidecar": psutil.Process(sidecar.pid), "baseline": psutil.Process(baseline.pid)},
                         seconds, every=0.5)
        return (*figures["sidecar"], *figures["baseline"])
    finally:
        sidecar.send_signal(signal.SIGTERM)
        sidecar.wait(timeout=30)
        if baseline is not None:
            baseline.kill()
            baseline.wait()


def main() -> int:
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    seconds = float(os.environ.get("BENCH_SECONDS", "30"))
    if len(sys.argv) == 3 and sys.argv[1] == "--profile":
        root = Path(tempfile.mkdtemp(prefix="bench-many-"))
        try:
            config = build(root, int(sys.argv[2]))
            cfg = load_config(config)
            scheduler = RetentionScheduler(cfg, watch_rolls=False)
            scheduler.passes.interval("default")
            profiler = cProfile.Profile()
            profiler.enable()
            scheduler.passes.interval("default")
            profiler.disable()
            scheduler.stop()
            pstats.Stats(profiler).sort_stats(os.environ.get("BENCH_SORT", "cumulative")).print_stats(int(os.environ.get("BENCH_ROWS", "30")))
        finally:
            shutil.rmtree(root, ignore_errors=True)
        return 0
    rows = {}
    for count in (100, 1000):
        root = Path(tempfile.mkdtemp(prefix=f"bench-many-{count}-"))
        try:
            config = build(root, count)
            rows[count] = (pass_time(config), bare_scandir(root), *idle_sidecar(config, seconds))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    print(f"{'':28}{'100 logs':>14}{'1,000 logs':>14}{'ratio':>9}")
    a, b = rows[100], rows[1000]
    print(f"{'pass (interval job)':28}{a[0] * 1000:>11.1f} ms{b[0] * 1000:>11.1f} ms{b[0] / a[0]:>8.1f}x")
    print(f"{'bare scandir of every log':28}{a[1] * 1000:>11.1f} ms{b[1] * 1000:>11.1f} ms{b[1] / a[1]:>8.1f}x")
    print(f"{'idle sidecar RSS':28}{a[2]:>11.1f} MB{b[2]:>11.1f} MB")
    print(f"{'idle sidecar CPU':28}{a[3]:>12.2f} %{b[3]:>12.2f} %")
    print(f"{'bare python RSS / CPU':28}{a[4]:>8.1f} MB {a[5]:.2f} %")
    print(f"FIGURE many_logs_pass_1000 {b[0] * 1000:.1f} ms baseline=pass_100:{a[0] * 1000:.1f}ms "
          f"ratio={b[0] / a[0]:.2f}")
    print(f"FIGURE many_logs_idle_rss_1000 {b[2]:.1f} MB baseline=bare_python:{b[4]:.1f}MB ratio={b[2] / b[4]:.2f}")
    print(f"FIGURE many_logs_idle_cpu_1000 {b[3]:.2f} % baseline=idle_100:{a[3]:.2f}% ratio={b[3] / max(a[3], 0.01):.2f}")
    met = b[0] <= 10 * a[0] and b[0] <= 0.3 and b[2] < 100 and b[3] < 2
    print("targets met" if met else "TARGET MISSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
