"""Where an idle sidecar's CPU goes, part by part (issue 39).

Builds BENCH_LOGS (default 2,000) logs as bench_retention_10k_logs does (nothing due, nothing
changes), starts a real `retention serve` over them whose jobs are wrapped to count their thread
CPU (`--child`), waits until it is ready and BENCH_SETTLE s more (default 20), then prints, over
BENCH_SECONDS (default 60): the process's CPU (from /proc/PID/stat) and each part's (the interval pass and within it the
key split, the pinned-file scan and the pass record; the disk check and within it the pressure
check; APScheduler's wakeups; the roll watch; the compaction job when one falls in the window).
`.venv/bin/python bench/bench_idle_cpu_parts.py`; the load average is printed with it.

BENCH_TREES (paths separated by ":") runs the sidecar from each of these source trees in turn over
the same logs, BENCH_ROUNDS (default 1) rounds interleaved: an A/B of two commits (`git worktree
add /tmp/base <commit>`), each figure beside the other's of the same round.
"""

from __future__ import annotations

import collections
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ORDER = ("interval pass", "  key split", "  pinned-file scan", "  pass record", "disk check", "  pressure check",
         "scheduler wakeups", "roll watch", "compaction job")
_ACC: dict[str, list] = collections.defaultdict(lambda: [0.0, 0])
_WINDOW: list = []


def _wrap(cls, name: str, label: str) -> None:
    inner = getattr(cls, name)

    @functools.wraps(inner)
    def counted(*args, **kwargs):
        t = time.thread_time()
        try:
            return inner(*args, **kwargs)
        finally:
            entry = _ACC[label]
            entry[0] += time.thread_time() - t
            entry[1] += 1
    setattr(cls, name, counted)


def child(config: str, out: str) -> int:
    """`retention serve --config CONFIG`, its parts counted; SIGUSR1 opens the window, SIGUSR2
    writes what it counted to `out`."""
    from retention.cli import main
    from retention.deletion.cleaner import Cleaner
    from retention.scheduling import health, jobs, rollwatch
    from retention.scheduling.compaction_passes import CompactionPasses
    from retention.scheduling.disk_check import DiskCheck
    from retention.scheduling.passes import DeletionPasses
    from retention.scheduling.pressure_watch import PressureWatch
    for cls, name, label in ((DeletionPasses, "interval", "interval pass"), (Cleaner, "_split", "  key split"),
                             (Cleaner, "_attach_pins", "  pinned-file scan"),
                             (health.PassLedger, "record", "  pass record"),
                             (CompactionPasses, "job", "compaction job"), (DiskCheck, "run", "disk check"),
                             (PressureWatch, "check", "  pressure check"),
                             (jobs.StepSafeScheduler, "_process_jobs", "scheduler wakeups"),
                             (rollwatch.RollWatch, "_read", "roll watch")):
        _wrap(cls, name, label)

    def opened(*_) -> None:
        _ACC.clear()
        _WINDOW[:] = [time.monotonic()]

    def written(*_) -> None:
        wall = time.monotonic() - _WINDOW[0]
        Path(out).write_text("".join(f"{label}\t{cpu}\t{calls}\t{wall}\n" for label, (cpu, calls) in _ACC.items()))
    signal.signal(signal.SIGUSR1, opened)
    signal.signal(signal.SIGUSR2, written)
    return main(["serve", "--config", config])


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(config: Path, seconds: float, tree: str | None = None) -> None:
    """One sidecar over `config`, its modules from source tree `tree` (None: this one's)."""
    from bench_retention_10k_logs import _wait_ready as wait_ready
    out, err = config.parent / "parts.tsv", config.parent / "sidecar.log"
    env = dict(os.environ, PYTHONPATH=tree) if tree else None
    proc = subprocess.Popen([sys.executable, __file__, "--child", str(config), str(out)], cwd=config.parent,
                            stdout=subprocess.DEVNULL, stderr=open(err, "w"), env=env)
    try:
        ready = wait_ready(err, time.monotonic())
        time.sleep(float(os.environ.get("BENCH_SETTLE", "20")))
        proc.send_signal(signal.SIGUSR1)
        cpu, t = _cpu(proc.pid), time.monotonic()
        time.sleep(seconds)
        cpu, wall = _cpu(proc.pid) - cpu, time.monotonic() - t
        proc.send_signal(signal.SIGUSR2)
        time.sleep(1)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    print(f"ready in {ready:.1f} s; process CPU over {wall:.1f} s: {cpu:.3f} s = {100 * cpu / wall:.2f} % of a core")
    counted = {line.split("\t")[0]: line.split("\t")[1:3] for line in out.read_text().splitlines()}
    for label in ORDER:
        part, calls = counted.get(label, (0.0, 0))
        print(f"  {label:24}{float(part) * 1000:>9.1f} ms {int(calls):>5} calls {100 * float(part) / wall:>7.2f} %")


def main() -> int:
    from bench_retention_10k_logs import build
    count = int(os.environ.get("BENCH_LOGS", "2000"))
    root = Path(tempfile.mkdtemp(prefix="bench-idle-parts-"))
    try:
        config = build(root, count)
        trees = [t for t in os.environ.get("BENCH_TREES", "").split(":") if t] or [None]
        for round_ in range(int(os.environ.get("BENCH_ROUNDS", "1"))):
            for tree in trees:
                print(f"round {round_ + 1}, {tree or 'this tree'}: {count:,} logs; "
                      f"load average before {os.getloadavg()[0]:.2f}")
                measure(config, float(os.environ.get("BENCH_SECONDS", "60")), tree)
                print(f"load average after {os.getloadavg()[0]:.2f} (2 cores shared)")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        sys.exit(child(sys.argv[2], sys.argv[3]))
    sys.exit(main())
