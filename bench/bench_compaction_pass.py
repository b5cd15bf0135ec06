"""A compaction pass that finds nothing to do over 10,000 segments, beside a no-op retention pass
over the same log in the same run (issue 13: at most 2x).

One real log of 10,000 sealed 4 KiB segments (built as bench_retention_pass builds it), nothing
marked dead, so every segment is fully live: the compaction pass lists the segments, reads the
marks, plans and writes nothing; the retention pass (reserve 72h, no hour window) plans and deletes
nothing. Both keep their log open between passes, as the sidecar does; best of interleaved rounds.

    .venv/bin/python bench/bench_compaction_pass.py
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from bench_retention_pass import build_log
from policies import load_config
from retention import Cleaner, Compactor

SEGMENTS = 10_000


def main(rounds: int = 7) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="bench-compact-pass-", dir=os.environ.get("BENCH_DIR")))
    try:
        log_dir = tmp / "log"
        build_log(log_dir, SEGMENTS)
        config_path = tmp / "retention.yaml"
        config_path.write_text(textwrap.dedent(f"""
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
        config = load_config(config_path)
        cleaner, compactor = Cleaner(config), Compactor(config)
        cleaner.run_pass()                                 # warm: both open the log once
        compactor.run()
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
        cleaner.close()
        compactor.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    clean, compact = min(cleans), min(compactions)
    ratio = compact / clean
    print(f"{SEGMENTS:,} segments, nothing to do: compaction pass {compact * 1000:.1f} ms, "
          f"retention pass {clean * 1000:.1f} ms, ratio {ratio:.2f} (target <= 2)")
    print(f"FIGURE compaction_noop_pass_10k {compact * 1000:.1f} ms "
          f"baseline=retention_pass:{clean * 1000:.1f}ms ratio={ratio:.2f}")
    print("target met" if ratio <= 2 else "TARGET MISSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
