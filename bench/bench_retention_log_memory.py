"""What one idle discovered log costs the sidecar in memory, measured in-process at two sizes.

The logs are bench_retention_10k_logs's (10 sealed 4 KiB segments, an active one, a consumer
group, nothing due, under one `discover` root). For each size (BENCH_SIZES, default 500,2000) a
child process builds a `RetentionScheduler` over them and runs the interval pass as the sidecar's
job does (recording, metrics, status), then after the first and the fifth pass (2.2 s apart, so
every log is carried: `retention.deletion.unchanged`) and one `/metrics` exposition, after a full
collection, reads:

- the live heap: malloc's bytes in use (PYTHONMALLOC=malloc and no tcache in the child, so every
  Python object and SQLite's own allocations are malloc blocks);
- with BENCH_TRACE=1, a second child: tracemalloc's live bytes grouped by the file that allocated
  them (prometheus_client, policies, retention's modules, commitlog...).

Printed: each figure at each size and per log, (large - small) / (large - small count), which
leaves out what does not grow with the logs. BENCH_ROOT=dir reuses built logs there.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SIZES = tuple(int(n) for n in os.environ.get("BENCH_SIZES", "500,2000").split(","))
PASSES = (1, 5)
TOP = 14


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def live_heap() -> int:
    """malloc's bytes handed out and not had back, after a full collection."""
    gc.collect()
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _site(filename: str) -> str:
    """A short name for the file that allocated: a package's module, or the package."""
    for marker in ("/site-packages/", "/lib/python3"):
        if marker in filename:
            tail = filename.split(marker, 1)[1]
            return tail.split("/")[0] if marker == "/site-packages/" else "stdlib:" + tail.split("/", 1)[-1]
    for package in ("retention", "policies", "commitlog"):
        if f"/{package}/" in filename:
            return package + "/" + filename.split(f"/{package}/", 1)[1]
    return filename


def child(config: str, trace: bool) -> None:
    """Passes over the logs of `config`; one JSON line of figures on stdout."""
    from loguru import logger

    from policies import load_config
    from retention import RetentionScheduler
    from retention.deletion.unchanged import RACY_NS

    logger.remove()
    if trace:
        import tracemalloc
        tracemalloc.start(1)
    figures: dict = {"heap0": live_heap(), "rss0": rss()}
    scheduler = RetentionScheduler(load_config(config), watch_rolls=False)
    try:
        for n in range(1, PASSES[-1] + 1):
            scheduler.passes.interval("default")
            if n in PASSES:
                scheduler.metrics.exposition()
                figures[f"heap{n}"], figures[f"rss{n}"] = live_heap(), rss()
                if trace:
                    stats = tracemalloc.take_snapshot().statistics("filename")
                    by_site: dict[str, int] = {}
                    for s in stats:
                        site = _site(s.traceback[0].filename)
                        by_site[site] = by_site.get(site, 0) + s.size
                    figures[f"sites{n}"] = by_site
            time.sleep(RACY_NS / 1e9 + 0.2)
        fs = next(iter(scheduler._state.filesystems.values()))
        figures["carried"] = fs.cleaner.memory.carried
    finally:
        scheduler.stop()
    print(json.dumps(figures))


def measure(config: Path, trace: bool) -> dict:
    env = dict(os.environ, PYTHONMALLOC="malloc", GLIBC_TUNABLES="glibc.malloc.tcache_count=0")
    out = subprocess.run([sys.executable, __file__, "--child", str(config), "1" if trace else "0"], env=env,
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def report(figures: dict[int, dict], traced: dict[int, dict] | None) -> None:
    small, large = SIZES
    span = large - small
    print(f"load average {os.getloadavg()[0]:.2f} (2 cores shared)")
    for n in PASSES:
        for what, key in (("live heap", "heap"), ("RSS", "rss")):
            a, b = figures[small][f"{key}{n}"], figures[large][f"{key}{n}"]
            print(f"after pass {n}: {what:9} {small:,} logs {a / 1e6:8.1f} MB   {large:,} logs {b / 1e6:8.1f} MB   "
                  f"per log {(b - a) / span / 1e3:6.1f} KB   10,000 logs ~{(a + (b - a) / span * (10_000 - small)) / 1e6:6.0f} MB")
        if traced is not None:
            sa, sb = traced[small][f"sites{n}"], traced[large][f"sites{n}"]
            growth = sorted(((sb.get(k, 0) - sa.get(k, 0), k) for k in set(sa) | set(sb)), reverse=True)
            total = sum(sb.values()) - sum(sa.values())
            print(f"  traced per log after pass {n}: {total / span / 1e3:.1f} KB, by allocating file:")
            for grow, site in growth[:TOP]:
                print(f"    {grow / span:8.0f} B  {site}")
    a, b = figures[small]["heap5"], figures[large]["heap5"]
    print(f"FIGURE log_memory_per_log {(b - a) / span / 1e3:.1f} KB baseline=heap_{small}_logs:{a / 1e6:.1f}MB "
          f"ratio={b / a:.2f}")


def main() -> int:
    from bench_retention_10k_logs import build
    given = os.environ.get("BENCH_ROOT")
    base = Path(given) if given else Path(tempfile.mkdtemp(prefix="bench-logmem-"))
    try:
        configs = {}
        for count in SIZES:
            root = base / str(count)
            if not (root / "retention.yaml").exists():
                root.mkdir(parents=True, exist_ok=True)
                build(root, count)
            configs[count] = root / "retention.yaml"
        figures = {count: measure(config, False) for count, config in configs.items()}
        traced = ({count: measure(config, True) for count, config in configs.items()}
                  if os.environ.get("BENCH_TRACE") else None)
    finally:
        if not given:
            shutil.rmtree(base, ignore_errors=True)
    report(figures, traced)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], sys.argv[3] == "1")
        sys.exit(0)
    sys.exit(main())
