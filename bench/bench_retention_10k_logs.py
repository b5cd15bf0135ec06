"""10,000 logs on one sidecar, against 1,000 measured in the same run.

Each log holds 10 sealed 4 KiB segments written an hour ago and an active one, and a consumer
group; the policy is bench_sidecar_idle's (a pass every 10 s, delete hour 4, reserve 72h): nothing
to delete, nothing changes. The logs are configured by `discover:` (one root each). Printed:

- the configuration: reading it (discover), and for comparison the YAML a `logs:` map naming
  10,000 logs would be, parsed with the bounded loader and validated (refused by the size bound);
- a warm pass, in this process, as the interval job runs it: with every log carried (nothing
  changed since its last plan) and with every log planned (the memory of the last plans dropped
  first), best of BENCH_ROUNDS (default 5) rounds interleaving 1,000 and 10,000; the ratio 10,000
  / 1,000 (target: at most 12x);
- the compaction job (`compact:default`) when no log changed since its last look (change-driven:
  none is opened or read), best of the same rounds, and the first job after the first pass (a
  look at every log, one run);
- a real `retention serve` over each: seconds from its start to ready (the first pass over every
  log done; target 60 s), largest RSS (target < 300 MB) and CPU over BENCH_SECONDS (default 60)
  from 15 s after ready (target < 1 % of a core), its descriptors and soft limit; a sleeping
  Python beside it is the baseline.

BENCH_COMPACTION=20s sets compaction.interval, so compaction passes run while the sidecar is
sampled (by default the first comes 5 min after start). BENCH_WINDOWS=N samples N windows of
BENCH_SECONDS one after another and prints each, their mean and the worst (the target is judged on
the worst); BENCH_SETTLE sets the wait after ready (default 15 s). The every-minute worst case of
docs/performance.md: BENCH_COMPACTION=2m BENCH_SETTLE=250 BENCH_WINDOWS=5 (the sample starts after
the first two compaction jobs, the first look and the one that marks logs clean, and holds two more
and the full check). The load average is printed before and
after. Needs an open-files limit above 11,000 (two sets of logs are owned at once by this process).
"""

from __future__ import annotations

import os
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
import yaml
from loguru import logger

from policies import load_config
from policies.config import RetentionConfig
from policies.yaml_bounds import MAX_CONFIG_BYTES, BoundedLoader
from retention import RetentionScheduler
from retention.deletion.unchanged import RACY_NS, PlanMemory

from bench_retention_many_logs import build_template
from bench_sidecar_idle import sample, sidecar_config

SIZES = tuple(int(n) for n in os.environ.get("BENCH_SIZES", "1000,10000").split(","))  # baseline, measured


def build(root: Path, count: int) -> Path:
    """`count` logs under root/logs and a configuration discovering them; returns the configuration."""
    template = build_template(root)
    (root / "logs").mkdir()
    for i in range(count):
        shutil.copytree(template, root / "logs" / f"log{i:05d}", copy_function=shutil.copy2,
                        ignore=shutil.ignore_patterns(".*"))
    shutil.rmtree(template)
    config = sidecar_config(root, "")
    text = config.read_text().replace("logs:\n", f"discover:\n  - root: {root / 'logs'}\n", 1)
    if os.environ.get("BENCH_COMPACTION"):    # a compaction interval short enough to fall in the sample
        text = text.replace("    reserve: 72h\n", f"    reserve: 72h\n    compaction:\n      interval: "
                            f"{os.environ['BENCH_COMPACTION']}\n", 1)
    config.write_text(text)
    return config


def named_yaml(root: Path, count: int) -> str:
    """The `logs:` map naming the same logs one by one."""
    logs = "".join(f"  log{i:05d}:\n    path: {root / 'logs' / f'log{i:05d}'}\n    segment_size: 4KiB\n"
                   for i in range(count))
    return f"service:\n  audit: {root}/audit.jsonl\nlogs:\n{logs}"


def config_costs(root: Path, config: Path, count: int) -> tuple[float, float, int]:
    """(seconds to load the discover configuration, seconds to parse and validate the named one, its bytes)."""
    t = time.perf_counter()
    load_config(config)
    discovered = time.perf_counter() - t
    text = named_yaml(root, count)
    t = time.perf_counter()
    RetentionConfig.model_validate(yaml.load(text, BoundedLoader), context={"base_dir": str(root)})
    return discovered, time.perf_counter() - t, len(text.encode())


def settle(scheduler: RetentionScheduler) -> None:
    """Passes until every log is carried (a first pass claims and opens them, which the next sees)."""
    for _ in range(5):
        time.sleep(RACY_NS / 1e9 + 0.2)
        fs = next(iter(scheduler._state.filesystems.values()))
        before = fs.cleaner.memory.planned
        scheduler.passes.interval("default")
        if fs.cleaner.memory.planned == before:
            return
    raise RuntimeError("the logs are planned every pass")


def timed_pass(scheduler: RetentionScheduler, *, forget: bool) -> float:
    fs = next(iter(scheduler._state.filesystems.values()))
    kept = fs.cleaner.memory
    if forget:
        fs.cleaner.memory = PlanMemory()
    t = time.perf_counter()
    scheduler.passes.interval("default")
    elapsed = time.perf_counter() - t
    fs.cleaner.memory = kept
    return elapsed


def timed_compaction(scheduler: RetentionScheduler) -> float:
    t = time.perf_counter()
    scheduler.compactions.job("default")
    return time.perf_counter() - t


def passes(configs: dict[int, Path], rounds: int) -> dict[int, tuple[float, ...]]:
    """count -> (cold first pass, best carried pass, best planned pass, best compaction job, the
    first compaction job), rounds interleaved."""
    schedulers, cold, cold_job = {}, {}, {}
    try:
        for count, config in configs.items():
            schedulers[count] = RetentionScheduler(load_config(config), watch_rolls=False)
            t = time.perf_counter()
            schedulers[count].passes.interval("default")
            cold[count] = time.perf_counter() - t
        for count, scheduler in schedulers.items():
            for i in range(3):                 # a first look claims each log, then its files settle
                time.sleep(RACY_NS / 1e9 + 0.2)
                took = timed_compaction(scheduler)
                cold_job[count] = took if i == 0 else cold_job[count]
            settle(scheduler)
        best = {count: [float("inf"), float("inf"), float("inf")] for count in configs}
        for _ in range(rounds):
            for count, scheduler in schedulers.items():
                best[count][0] = min(best[count][0], timed_pass(scheduler, forget=False))
                best[count][1] = min(best[count][1], timed_pass(scheduler, forget=True))
                settle(scheduler)
                best[count][2] = min(best[count][2], timed_compaction(scheduler))
        return {count: (cold[count], *best[count], cold_job[count]) for count in configs}
    finally:
        for scheduler in schedulers.values():
            scheduler.stop()


def sidecar(config: Path, seconds: float) -> dict:
    """A real `retention serve`: start to ready, then RSS, CPU and descriptors over `seconds`."""
    err = config.parent / "sidecar.log"
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "retention.cli", "serve", "--config", str(config)],
                            cwd=config.parent, stdout=subprocess.DEVNULL, stderr=open(err, "w"))
    baseline = None
    try:
        ready = _wait_ready(err, started)
        time.sleep(float(os.environ.get("BENCH_SETTLE", "15")))     # past the passes that settle the logs
        windows = int(os.environ.get("BENCH_WINDOWS", "1"))
        baseline = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({windows * seconds + 5})"])
        time.sleep(0.5)
        me = psutil.Process(proc.pid)
        each = [sample({"sidecar": me, "baseline": psutil.Process(baseline.pid)}, seconds, every=0.5)
                for _ in range(windows)]
        cpus = [figures["sidecar"][1] for figures in each]
        return {"ready": ready, "rss": max(f["sidecar"][0] for f in each), "cpu": sum(cpus) / len(cpus),
                "worst": max(cpus), "windows": cpus, "base_rss": max(f["baseline"][0] for f in each),
                "base_cpu": sum(f["baseline"][1] for f in each) / len(each),
                "fds": me.num_fds(), "limit": me.rlimit(psutil.RLIMIT_NOFILE)[0]}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        if baseline is not None:
            baseline.kill()
            baseline.wait()


def _wait_ready(err: Path, started: float) -> float:
    url = None
    while time.monotonic() - started < 300:
        if url is None:
            match = re.search(r"HTTP on (http://\S+) ", err.read_text())
            url = match.group(1) if match else None
        if url is not None:
            try:
                with urllib.request.urlopen(url + "/readyz", timeout=10) as answer:
                    if answer.status == 200:
                        return time.monotonic() - started
            except OSError:
                pass
        time.sleep(0.2)
    raise RuntimeError(f"sidecar not ready in 300 s:\n{err.read_text()[-2000:]}")


def main() -> int:
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    seconds = float(os.environ.get("BENCH_SECONDS", "60"))
    rounds = int(os.environ.get("BENCH_ROUNDS", "5"))
    load_before = os.getloadavg()
    roots = {count: Path(tempfile.mkdtemp(prefix=f"bench-10k-{count}-")) for count in SIZES}
    try:
        configs = {count: build(root, count) for count, root in roots.items()}
        config_figures = config_costs(roots[SIZES[1]], configs[SIZES[1]], SIZES[1])
        pass_figures = passes(configs, rounds)
        side = {count: sidecar(config, seconds) for count, config in configs.items()}
    finally:
        for root in roots.values():
            shutil.rmtree(root, ignore_errors=True)
    report(config_figures, pass_figures, side, load_before, os.getloadavg())
    return 0


def report(config_figures, pass_figures, side, load_before, load_after) -> None:
    discovered, named, named_bytes = config_figures
    a, b = pass_figures[SIZES[0]], pass_figures[SIZES[1]]
    print(f"load average before {load_before[0]:.2f} {load_before[1]:.2f}, after {load_after[0]:.2f} "
          f"{load_after[1]:.2f} (2 cores shared)")
    print(f"configuration: discover over {SIZES[1]:,} directories {discovered * 1000:.0f} ms; a logs: map naming "
          f"them {named_bytes / 1024:.0f} KiB (bound {MAX_CONFIG_BYTES // 1024} KiB) parses and validates in "
          f"{named:.2f} s")
    print(f"{'':34}{f'{SIZES[0]:,} logs':>14}{f'{SIZES[1]:,} logs':>14}{'ratio':>9}")
    for i, what in ((0, "first pass (cold)"), (1, "warm pass, every log carried"), (2, "warm pass, every log planned"),
                    (3, "compaction job, nothing changed"), (4, "compaction job, the first")):
        print(f"{what:34}{a[i] * 1000:>11.1f} ms{b[i] * 1000:>11.1f} ms{b[i] / a[i]:>8.1f}x")
    s1, s2 = side[SIZES[0]], side[SIZES[1]]
    print(f"{'sidecar: start to ready':34}{s1['ready']:>12.1f} s{s2['ready']:>12.1f} s")
    print(f"{'sidecar: largest RSS':34}{s1['rss']:>11.1f} MB{s2['rss']:>11.1f} MB")
    print(f"{'sidecar: CPU, idle':34}{s1['cpu']:>12.2f} %{s2['cpu']:>12.2f} %")
    if len(s2["windows"]) > 1:
        print(f"{'sidecar: CPU, worst window':34}{s1['worst']:>12.2f} %{s2['worst']:>12.2f} %")
        for count, s in ((SIZES[0], s1), (SIZES[1], s2)):
            print(f"  {count:,} logs, each window: " + ", ".join(f"{cpu:.2f} %" for cpu in s["windows"]))
    print(f"{'sidecar: descriptors / soft limit':34}{s1['fds']:>7} / {s1['limit']:<5}{s2['fds']:>7} / {s2['limit']}")
    print(f"{'bare python RSS / CPU':34}{s2['base_rss']:>11.1f} MB{s2['base_cpu']:>12.2f} %")
    print(f"FIGURE many_logs_pass_10000 {b[1] * 1000:.1f} ms baseline=pass_1000:{a[1] * 1000:.1f}ms "
          f"ratio={b[1] / a[1]:.2f}")
    print(f"FIGURE many_logs_idle_cpu_10000 {s2['cpu']:.2f} % baseline=idle_1000:{s1['cpu']:.2f}% "
          f"ratio={s2['cpu'] / max(s1['cpu'], 0.01):.2f}")
    print(f"FIGURE many_logs_rss_10000 {s2['rss']:.1f} MB baseline=bare_python:{s2['base_rss']:.1f}MB "
          f"ratio={s2['rss'] / s2['base_rss']:.2f}")
    met = {"pass <= 12x": b[1] <= 12 * a[1], "RSS < 300 MB": s2["rss"] < 300, "CPU < 1 %": s2["worst"] < 1,
           "ready <= 60 s": s2["ready"] <= 60}
    print("targets: " + ", ".join(f"{k} {'met' if v else 'MISSED'}" for k, v in met.items()))


if __name__ == "__main__":
    sys.exit(main())
