"""Churn a real sidecar (as tests/retention/test_sidecar_memory.py does) with the probe loaded,
asking it for figures at a few deletion counts. Diagnostic only, run by hand:

    PYTHONPATH=$PWD/tests/retention:$PWD/tests:$PWD python tests/retention/memprobe/drive.py OUT WARM STEP STEPS [BACKLOG]

writes OUT/at-<deletions>.json (and .snap with MEMPROBE_TRACE) and OUT/samples.json."""

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from commitlog import CommitLog, StoreFullError
from retention_helpers import write_config
from sidecar_helpers import Sidecar
import test_sidecar_memory as t

_PASSES = re.compile(r'^retention_passes_total\{[^}]*\} (\S+)$', re.M)


def main(out: str, warm: int, step: int, steps: int, backlog: int | None) -> None:
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    here = Path(__file__).resolve().parent
    mnt = tempfile.mkdtemp(prefix="memprobe-")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", mnt], check=True)
    tmp = Path(tempfile.mkdtemp(prefix="memprobe-cfg-"))
    env = {"MEMPROBE_DIR": str(out), "PYTHONPATH": f"{here}:{os.environ['PYTHONPATH']}"}
    if backlog is None:
        backlog = t._BACKLOG
    try:
        config_path, _ = write_config(tmp, t._config(tmp, f"{mnt}/churn"))
        batch = [os.urandom(1000) for _ in range(60)]
        marks = [warm + i * step for i in range(steps + 1)]
        samples = []
        with CommitLog.open(f"{mnt}/churn", segment_size=64 << 10, flush="none") as log, \
                Sidecar(config_path, cwd=tmp, env=env) as sidecar:
            sidecar.wait_ready()
            proc = psutil.Process(sidecar.proc.pid)
            next_look = 0.0
            while marks:
                if len(log.segments()) > backlog:
                    time.sleep(0.01)
                else:
                    try:
                        log.append_batch(batch)
                    except StoreFullError:
                        time.sleep(0.05)
                    time.sleep(0.002)
                if time.monotonic() < next_look:
                    continue
                next_look = time.monotonic() + 0.5
                metrics = sidecar.request("GET", "/metrics")[2].decode()
                done = int(sum(float(v) for v in t._DELETED.findall(metrics)))
                passes = int(sum(float(v) for v in _PASSES.findall(metrics)))
                samples.append((time.time(), done, passes, proc.memory_info().rss, len(log.segments()), proc.num_threads()))
                if done >= marks[0]:
                    marks.pop(0)
                    name = f"at-{done}"
                    (out / f"{name}.req").touch()
                    while not (out / f"{name}.json").exists():
                        time.sleep(0.1)
                    print(name, samples[-1], flush=True)
        (out / "samples.json").write_text(json.dumps(samples))
    finally:
        subprocess.run(["umount", "-l", mnt])
        os.rmdir(mnt)


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], int(a[1]), int(a[2]), int(a[3]), int(a[4]) if len(a) > 4 else None)
