"""Start-up at many logs: from a scheduler's start to ready (its first pass over every log done),
per log, at two sizes measured in the same run.

The logs are bench_retention_10k_logs' (10 sealed 4 KiB segments and an active one each, a consumer
group, nothing due, found by `discover:`). Each measurement is a fresh process (so every log is
claimed and opened cold) running `RetentionScheduler(config).start()` with the roll watch on, as
`retention serve` does, until `ready`: printed are its seconds and CPU seconds (user + system) per
log, and how many checks the roll watch made meanwhile. Best of BENCH_ROUNDS (default 3) rounds
interleaving the sizes (BENCH_SIZES, default 1000,3000).

The ratio of per-log CPU, larger size / smaller, says whether start-up grows linearly (1.0; CPU
rather than wall time, which follows the machine's load on 2 shared cores). BENCH_BASELINE=DIR, a
checkout of another revision, runs each measurement on that code too, interleaved: the ratio
this / that at each size is before and after a change.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SIZES = tuple(int(n) for n in os.environ.get("BENCH_SIZES", "1000,3000").split(","))


def child(config: str, count: int) -> None:
    """In a fresh process: start to ready; prints `seconds cpu_seconds roll_checks`."""
    from loguru import logger

    from policies import load_config
    from retention import RetentionScheduler
    from retention.deletion.owner import raise_descriptor_limit

    logger.remove()
    logger.add(sys.stderr, level="ERROR")
    raise_descriptor_limit()
    loaded = load_config(config)
    assert len(loaded.logs) == count, f"{len(loaded.logs)} logs found, {count} built"
    cpu = _cpu()
    started = time.monotonic()
    scheduler = RetentionScheduler(loaded)
    try:
        scheduler.start()
        while not scheduler.ready:
            time.sleep(0.05)
        seconds, used = time.monotonic() - started, _cpu() - cpu
        rolls = scheduler.disk_check._rolls
        print(f"{seconds:.4f} {used:.4f} {rolls.checks if rolls is not None else -1}")
    finally:
        scheduler.stop()


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(tree: Path, config: Path, count: int) -> tuple[float, float, int]:
    """(seconds, CPU seconds, roll watch checks) of one start to ready, the code of `tree`."""
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{HERE}"}
    done = subprocess.run([sys.executable, str(HERE / "bench_retention_start.py"), "--child", str(config),
                           str(count)], capture_output=True, text=True, env=env, cwd=tree, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"start-up of {count} logs ({tree}) failed:\n{done.stderr[-2000:]}")
    seconds, cpu, checks = done.stdout.split()
    return float(seconds), float(cpu), int(checks)


def main() -> int:
    from bench_retention_10k_logs import build

    rounds = int(os.environ.get("BENCH_ROUNDS", "3"))
    trees = {"this": HERE.parent}
    if os.environ.get("BENCH_BASELINE"):
        trees["baseline"] = Path(os.environ["BENCH_BASELINE"]).resolve()
    load_before = os.getloadavg()
    roots = {count: Path(tempfile.mkdtemp(prefix=f"bench-start-{count}-")) for count in SIZES}
    best: dict[tuple[str, int], list] = {}
    try:
        configs = {count: build(root, count) for count, root in roots.items()}
        for _ in range(rounds):
            for count, config in configs.items():
                for name, tree in trees.items():
                    seconds, cpu, checks = measure(tree, config, count)
                    kept = best.setdefault((name, count), [seconds, cpu, checks])
                    kept[0], kept[1] = min(kept[0], seconds), min(kept[1], cpu)
                    kept[2] = max(kept[2], checks)
    finally:
        for root in roots.values():
            shutil.rmtree(root, ignore_errors=True)
    report(best, trees, load_before, os.getloadavg())
    return 0


def report(best: dict, trees: dict, load_before, load_after) -> None:
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} (2 cores shared)")
    small, large = SIZES
    for name in trees:
        for count in SIZES:
            seconds, cpu, checks = best[(name, count)]
            print(f"{name:>8} {count:>6,} logs: start to ready {seconds:6.2f} s ({seconds / count * 1000:.2f} ms a log), "
                  f"CPU {cpu:6.2f} s ({cpu / count * 1000:.2f} ms a log), roll watch checks {checks}")
        per_log = [best[(name, n)][1] / n for n in SIZES]
        print(f"{name:>8}: CPU a log at {large:,} / at {small:,}: {per_log[1] / per_log[0]:.2f} (1.0: linear)")
    this = best[("this", large)][1] / large * 1000
    print(f"FIGURE start_cpu_per_log_{large} {this:.2f} ms baseline=at_{small}:"
          f"{best[('this', small)][1] / small * 1000:.2f}ms ratio={this / (best[('this', small)][1] / small * 1000):.2f}")
    if "baseline" in trees:
        for count in SIZES:
            a, b = best[("this", count)], best[("baseline", count)]
            print(f"this / baseline at {count:,} logs: start to ready {a[0] / b[0]:.2f}, CPU {a[1] / b[1]:.2f}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]))
        sys.exit(0)
    sys.exit(main())
