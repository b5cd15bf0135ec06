"""A cleanup pass that deletes nothing over 10,000 and 100,000 segments, beside a bare os.scandir
of the same directory measured in the same run: a pass over a log that has run a while, its active
segment just written to (a busy log: the pass plans it).

Targets: 10,000 segments in at most 50 ms; 100,000 in at most 12 times the 10,000 figure.

Also the cost of one deletion through a pass (plan, audit intent fsynced, removal, audit outcome),
beside the store's bare `remove_head` loop over an identical log in the same run, best of
interleaved rounds.

The logs are real: one sealed 4 KiB segment is written by the store, then copied under each base
offset (records carry no offsets, so a copy is a valid segment of the next range; its index is
copied without the base offset it records).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from loguru import logger

from commitlog import CommitLog
from commitlog.segments.index import without_base
from policies import load_config
from retention import Cleaner
from retention.deletion.log_keys import RACY_NS


def build_log(path: Path, segments: int) -> None:
    template = path.with_name(path.name + "-template")
    with CommitLog.open(template, segment_size=4096, flush="none") as log:
        log.append_batch([b"r" * 100] * 40)             # 33 fit in the first segment
        first = log.segments()[0]
        per_segment = first.record_count
    path.mkdir()
    for name in ("meta.json", "start.offset"):      # a log of today's store (one from before
        shutil.copy(template / name, path / name)    # start.offset has each pass read state.db)
    seg = (template / f"{0:020d}.log").read_bytes()
    # The index without the base offset it records, so it is valid under every copy's name.
    idx = without_base((template / f"{0:020d}.index").read_bytes())
    old = time.time() - 3600
    for i in range(segments):
        base = i * per_segment
        for suffix, data in ((".log", seg), (".index", idx)):
            p = path / f"{base:020d}{suffix}"
            with open(p, "wb") as f:
                f.write(data)
            os.utime(p, (old, old))
    with CommitLog.open(path, readonly=True):
        pass
    shutil.rmtree(template)


def bare_scandir(path: Path) -> float:
    t = time.perf_counter()
    with os.scandir(path) as it:
        for _ in it:
            pass
    return time.perf_counter() - t


def idle_config(tmp: Path, log_dir: Path, name: str) -> Path:
    """A configuration under which a pass over `log_dir` (segments an hour old) deletes nothing."""
    config = tmp / name
    config.write_text(textwrap.dedent(f"""
        service:
          audit: {tmp}/audit.jsonl
        logs:
          big:
            path: {log_dir}
            segment_size: 4KiB
        policies:
          default:
            delete_at_hours: []
            reserve: 72h
    """))
    return config


def time_pass(tmp: Path, segments: int, repeats: int = 5) -> tuple[float, float]:
    """Medians of (a pass over the log just written to, a bare scandir of its directory), seconds.
    Its files are left to settle first (older than the racy-mtime window, as on a host where the
    log has run a while); before each pass the active segment is written to (its mtime moved, as
    an append moves it), so the pass looks at the log again and plans it, as for a busy log."""
    log_dir = tmp / f"log{segments}"
    build_log(log_dir, segments)
    cleaner = Cleaner(load_config(idle_config(tmp, log_dir, f"retention{segments}.yaml")))
    cleaner.run_pass()                                   # warm: opens the log, caches the policy
    last = max(log_dir.glob("*.log"))
    passes, scans = [], []
    for _ in range(repeats):
        time.sleep(RACY_NS / 1e9 + 0.2)                  # what was written before has settled
        os.utime(last)                                   # written to: mtime and ctime now
        t = time.perf_counter()
        result = cleaner.run_pass()
        passes.append(time.perf_counter() - t)
        log_result = result.logs[0]
        assert result.deleted == 0 and not log_result.unchanged
        assert len(log_result.plan.decisions) + log_result.not_examined == segments
        scans.append(bare_scandir(log_dir))
    cleaner.close()
    return statistics.median(passes), statistics.median(scans)


def time_deletions(tmp: Path, segments: int = 300, rounds: int = 3) -> tuple[float, float]:
    """Seconds per deletion: (a pass deleting `segments`, the bare remove_head loop), best of rounds."""
    passes, bares = [], []
    logger.disable("retention")  # one INFO line per deletion would measure the terminal
    for r in range(rounds):
        bare_dir = tmp / f"bare{r}"
        build_log(bare_dir, segments + 1)
        with CommitLog.open(bare_dir, readonly=True) as log:
            t = time.perf_counter()
            while log.remove_head(force=True).status == "removed":
                pass
            bares.append((time.perf_counter() - t) / segments)
        pass_dir = tmp / f"del{r}"
        build_log(pass_dir, segments + 1)
        config = tmp / f"del{r}.yaml"
        config.write_text(textwrap.dedent(f"""
            service:
              audit: {tmp}/audit-del{r}.jsonl
            logs:
              big:
                path: {pass_dir}
                segment_size: 4KiB
            policies:
              default:
                delete_at_hours: []
                reserve: 1s
                files_per_pass: {segments}
                pause_between_files: 0s
        """))
        cleaner = Cleaner(load_config(config))
        cleaner.trigger_manual()
        t = time.perf_counter()
        result = cleaner.run_pass()
        passes.append((time.perf_counter() - t) / segments)
        assert result.deleted == segments, result.deleted
        cleaner.close()
        shutil.rmtree(bare_dir)
        shutil.rmtree(pass_dir)
    return min(passes), min(bares)


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="bench-pass-", dir=os.environ.get("BENCH_DIR")))
    try:
        p10, s10 = time_pass(tmp, 10_000)
        p100, s100 = time_pass(tmp, 100_000, repeats=3)
        d_pass, d_bare = time_deletions(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"one deletion: in a pass {d_pass * 1000:.2f} ms, bare remove_head {d_bare * 1000:.2f} ms, "
          f"ratio {d_pass / d_bare:.2f}")
    print(f"FIGURE pass_deletion {d_pass * 1000:.2f} ms baseline=remove_head:{d_bare * 1000:.2f}ms "
          f"ratio={d_pass / d_bare:.2f}")
    print(f"10,000 segments:  pass {p10 * 1000:.1f} ms, bare scandir {s10 * 1000:.1f} ms, "
          f"pass/scandir {p10 / s10:.1f}x (target: pass <= 50 ms)")
    print(f"100,000 segments: pass {p100 * 1000:.1f} ms, bare scandir {s100 * 1000:.1f} ms, "
          f"pass/scandir {p100 / s100:.1f}x; 100k/10k {p100 / p10:.1f}x (target <= 12x)")
    print(f"FIGURE pass_10k_segments {p10 * 1000:.1f} ms baseline=scandir:{s10 * 1000:.1f}ms ratio={p10 / s10:.2f}")
    print(f"FIGURE pass_100k_over_10k {p100 / p10:.2f} x baseline=pass_10k:{p10 * 1000:.1f}ms ratio={p100 / p10:.2f}")
    ok = p10 <= 0.050 and p100 <= 12 * p10
    print("targets met" if ok else "TARGET MISSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
