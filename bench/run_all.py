"""Run every bench/bench_*.py in turn (found by glob, so new benchmarks join by their name) and
finish with a summary of their FIGURE lines.

Usage: python bench/run_all.py [substring ...]   (only the scripts whose name contains one)
Exit status: 0 when every script ran to completion, 1 when one failed or timed out; a missed
target is a figure to report, not a failure of the run.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT = 900  # seconds per script


def main(argv: list[str]) -> int:
    scripts = sorted(glob.glob(os.path.join(HERE, "bench_*.py")))
    if argv:
        scripts = [s for s in scripts if any(a in os.path.basename(s) for a in argv)]
    figures: list[str] = []
    failed: list[str] = []
    for script in scripts:
        name = os.path.basename(script)
        print(f"=== {name}", flush=True)
        started = time.monotonic()
        try:
            proc = subprocess.Popen([sys.executable, script], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, cwd=os.path.dirname(HERE))
            deadline = started + TIMEOUT
            for line in proc.stdout:  # streamed, so a long benchmark shows its progress
                print(line, end="", flush=True)
                if line.startswith("FIGURE "):
                    figures.append(f"{name}: {line.strip()}")
                if time.monotonic() > deadline:
                    proc.kill()
            rc = proc.wait()
        except OSError as exc:
            print(f"could not run {name}: {exc}")
            rc = -1
        elapsed = time.monotonic() - started
        if rc != 0:
            failed.append(f"{name} (exit status {rc})")
        print(f"=== {name}: {'ok' if rc == 0 else 'FAILED'} in {elapsed:.1f}s\n", flush=True)
    print("=== summary")
    for line in figures:
        print(line)
    for name in failed:
        print(f"FAILED {name}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
