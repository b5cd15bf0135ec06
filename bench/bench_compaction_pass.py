"""A compaction pass that finds nothing to do over 10,000 segments, beside a no-op retention pass
over the same log in the same run (issue 13: at most 2x).

One real log of 10,000 sealed 4 KiB segments (built as bench_retention_pass builds it), nothing
marked dead, so every segment is fully live: the compaction pass lists the segments, reads the
marks, plans and writes nothing; the retention pass (reserve 72h, no hour window) plans and deletes
nothing. Both keep their log open between passes, as the sidecar does; best of interleaved rounds.
Then a record in every tenth segment is marked dead (live share 0.97: above max_live_ratio, still
nothing to do), measured again; then all but three records of those segments, compacted away, and
measured a third time: the marks are all applied, nothing to do, but the marks file is not empty.

    .venv/bin/python bench/bench_compaction_pass.py
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench_retention_pass import build_log, idle_config
from commitlog import CommitLog
from loguru import logger
from policies import load_config
from retention import Cleaner, Compactor

SEGMENTS = 10_000


def main(rounds: int = 7) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="bench-compact-pass-", dir=os.environ.get("BENCH_DIR")))
    try:
        log_dir = tmp / "log"
        build_log(log_dir, SEGMENTS)
        config = load_config(idle_config(tmp, log_dir, "retention.yaml"))
        cleaner, compactor = Cleaner(config), Compactor(config)
        cleaner.run_pass()                                 # warm: both open the log once
        compactor.run()
        ratios = [report("nothing marked", *interleaved(cleaner, compactor, rounds))]
        # The bench's own handle: the compactor closes the logs it carries between its passes.
        with CommitLog.open(log_dir, flush="none") as log:
            sealed = log.segments()[:-1]
            log.mark_dead([s.base_offset for s in sealed[::10]])   # 1 record of 33: above max_live_ratio
        ratios.append(report("a little dead", *interleaved(cleaner, compactor, rounds)))
        with CommitLog.open(log_dir, flush="none") as log:
            log.mark_dead([o for s in sealed[::10] for o in range(s.base_offset + 1, s.end_offset - 3)])
        logger.disable("retention")                        # an INFO line per output
        while compactor.run().outputs:                     # compacts them (at most 60 s a pass)
            pass
        logger.enable("retention")
        with CommitLog.open(log_dir, readonly=True) as log:
            assert all(s.live_bytes == s.used_bytes for s in log.segments())
        ratios.append(report("marks all applied", *interleaved(cleaner, compactor, rounds)))
        cleaner.close()
        compactor.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("target met" if max(ratios) <= 2 else "TARGET MISSED")
    return 0


def interleaved(cleaner: Cleaner, compactor: Compactor, rounds: int) -> tuple[float, float]:
    """(best retention pass, best compaction pass) in seconds, each finding nothing to do."""
    cleans, compactions = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        result = cleaner.run_pass()
        cleans.append(time.perf_counter() - t)
        assert result.deleted == 0, result.deleted
        t = time.perf_counter()
        compacted = compactor.run()
        compactions.append(time.perf_counter() - t)
        assert compacted.outputs == 0 and not compacted.failed, compacted.to_json_dict()
    return min(cleans), min(compactions)


def report(case: str, clean: float, compact: float) -> float:
    ratio = compact / clean
    print(f"{SEGMENTS:,} segments, nothing to do ({case}): compaction pass {compact * 1000:.1f} ms, "
          f"retention pass {clean * 1000:.1f} ms, ratio {ratio:.2f} (target <= 2)")
    print(f"FIGURE compaction_noop_pass_10k_{case.replace(' ', '_')} {compact * 1000:.1f} ms "
          f"baseline=retention_pass:{clean * 1000:.1f}ms ratio={ratio:.2f}")
    return ratio


if __name__ == "__main__":
    sys.exit(main())
