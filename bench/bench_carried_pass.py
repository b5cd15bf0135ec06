"""A carried log's cost in an interval pass, in-process (issue 39): what a pass costs a log none of
whose inputs changed since its last plan.

Builds BENCH_LOGS (default 2,500) logs as bench_retention_10k_logs does (nothing due, nothing
changes), one set for each tree measured; in a child process per tree, a scheduler with the roll
watch on (as `retention serve` runs it: inotify dirty-marking where the code has it) passes over
them until every log is carried, then times BENCH_PASSES (default 5) interval passes a round, the
CPU of its thread (the collector's share to stderr), one pass at the full check (every log's
key and end read, as every `FULL_CHECK` seconds) and one at the end check (every log's end read
without its key, as every `END_CHECK` seconds; nan for a tree without it). Rounds (BENCH_ROUNDS, default 3) interleave
the trees; printed: the best of each and its cost a log. BENCH_BASELINE=DIR, a checkout of another
revision, is the tree before a change. `--profile` prints a cProfile of one carried pass of this
tree instead (BENCH_LOGS logs; BENCH_SORT, default tottime).
`PYTHONPATH=$PWD .venv/bin/python bench/bench_carried_pass.py`
"""

from __future__ import annotations

import cProfile
import gc
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child(config: str) -> int:
    """Settle a scheduler over `config`'s logs, then answer each line of stdin with the thread CPU
    of the best of BENCH_PASSES carried passes (or print a profile, for `profile`)."""
    from loguru import logger

    from policies import load_config
    from retention import RetentionScheduler
    from retention.deletion.unchanged import RACY_NS

    logger.remove()
    scheduler = RetentionScheduler(load_config(config), watch_rolls=True)
    scheduler.disk_check.watch()
    fs = next(iter(scheduler._state.filesystems.values()))
    for _ in range(8):                 # until no log is planned nor (with dirty marks) keyed
        time.sleep(RACY_NS / 1e9 + 0.3)
        memory = fs.cleaner.memory
        before = (memory.planned, getattr(memory, "keyed", 0))
        scheduler.passes.interval("default")
        if (memory.planned, getattr(memory, "keyed", 0)) == before:
            break
    else:
        raise RuntimeError("the logs are planned every pass")
    collector = {"seconds": 0.0, "full": 0, "started": 0.0}

    def timed(phase: str, info: dict) -> None:       # the collector's time within the passes
        if phase == "start":
            collector["started"] = time.thread_time()
        else:
            collector["seconds"] += time.thread_time() - collector["started"]
            collector["full"] += info["generation"] == 2
    gc.callbacks.append(timed)
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "profile":
            profiler = cProfile.Profile()
            profiler.enable()
            scheduler.passes.interval("default")
            profiler.disable()
            stats = pstats.Stats(profiler, stream=sys.stderr)
            stats.sort_stats(os.environ.get("BENCH_SORT", "tottime")).print_stats(45)
            print("done", flush=True)
            continue
        if line.strip() in ("full", "end"):
            # A pass at the full check (changes.FULL_CHECK: every key taken, and every end read), or
            # at the end check (unchanged.END_CHECK: every end read, no key; nan for a tree without it).
            from retention.deletion import changes, unchanged
            module, name = (changes, "FULL_CHECK") if line.strip() == "full" else (unchanged, "END_CHECK")
            if not hasattr(module, name):
                print("nan", flush=True)
                continue
            every = getattr(module, name)
            setattr(module, name, 0.0)
            t = time.thread_time()
            scheduler.passes.interval("default")
            print(time.thread_time() - t, flush=True)
            setattr(module, name, every)
            continue
        best = float("inf")
        for _ in range(int(os.environ.get("BENCH_PASSES", "5"))):
            planned = fs.cleaner.memory.planned
            t = time.thread_time()
            scheduler.passes.interval("default")
            best = min(best, time.thread_time() - t)
            if fs.cleaner.memory.planned != planned:
                raise RuntimeError("a log was planned in a carried pass")
        print(best, flush=True)
        print(f"collector: {collector['seconds'] * 1e3:.1f} ms, {collector['full']} full collections so far",
              file=sys.stderr)
    scheduler.stop()
    gc.collect()
    return 0


def _start(tree: Path, config: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=f"{tree}{os.pathsep}{HERE}")
    proc = subprocess.Popen([sys.executable, str(HERE / "bench_carried_pass.py"), "--child", str(config)],
                            cwd=tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    if proc.stdout.readline().strip() != "ready":
        raise RuntimeError(f"{tree}: the child did not settle")
    return proc


def main() -> int:
    sys.path.insert(0, str(HERE))
    from bench_retention_10k_logs import build

    count = int(os.environ.get("BENCH_LOGS", "2500"))
    trees = {"this": HERE.parent}
    if os.environ.get("BENCH_BASELINE"):
        trees["baseline"] = Path(os.environ["BENCH_BASELINE"]).resolve()
    if "--profile" in sys.argv:
        trees = {"this": HERE.parent}
    load_before = os.getloadavg()
    roots = {name: Path(tempfile.mkdtemp(prefix=f"bench-carried-{name}-")) for name in trees}
    procs: dict[str, subprocess.Popen] = {}
    best = {name: float("inf") for name in trees}
    full = dict(best)                 # the pass at the full check, every FULL_CHECK
    ends = dict(best)                 # the pass at the end check, every END_CHECK (where there is one)
    try:
        for name, tree in trees.items():
            procs[name] = _start(tree, build(roots[name], count))
        if "--profile" in sys.argv:
            procs["this"].stdin.write("profile\n")
            procs["this"].stdin.flush()
            procs["this"].stdout.readline()
            return 0
        for _ in range(int(os.environ.get("BENCH_ROUNDS", "3"))):
            for name, proc in procs.items():
                for what, into in (("pass", best), ("full", full), ("end", ends)):
                    proc.stdin.write(what + "\n")
                    proc.stdin.flush()
                    into[name] = min(into[name], float(proc.stdout.readline()))
    finally:
        for proc in procs.values():
            proc.stdin.close()
            proc.wait(timeout=120)
        for root in roots.values():
            shutil.rmtree(root, ignore_errors=True)
    print(f"{count} logs, load average {load_before[0]:.1f} -> {os.getloadavg()[0]:.1f}")
    for name, seconds in best.items():
        print(f"{name:9} carried pass {seconds * 1e3:8.1f} ms CPU   {seconds / count * 1e6:6.1f} µs a log;"
              f"   at the full check {full[name] * 1e3:8.1f} ms   {full[name] / count * 1e6:6.1f} µs a log;"
              f"   at the end check {ends[name] * 1e3:8.1f} ms   {ends[name] / count * 1e6:6.1f} µs a log")
    if "baseline" in best:
        print(f"this / baseline: {best['this'] / best['baseline']:.2f}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        sys.exit(child(sys.argv[2]))
    sys.exit(main())
