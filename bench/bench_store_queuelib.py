"""The same 1 M appends of 100-byte records through queuelib's FifoDiskQueue (a peer a user
might pick instead), measured in the same run as the log.

Target: ours at least 3 times faster. The figure compares append_batch (one call for the 1 M
records, as in bench_store_append_batch) with FifoDiskQueue.push per record (it has no batch
call); one append() per record is printed beside it, also against queuelib. Both write to the
same filesystem with no fsync (flush="none"; FifoDiskQueue never fsyncs), and both are closed
inside the timed region. Best of a few interleaved rounds.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time

from queuelib import FifoDiskQueue

from commitlog import CommitLog

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_store_append_batch import make_values  # noqa: E402

N = 1_000_000
ROUNDS = 2


def time_queuelib(path: str, values: list[bytes]) -> float:
    t = time.perf_counter()
    q = FifoDiskQueue(path)
    push = q.push
    for v in values:
        push(v)
    q.close()
    rate = len(values) / (time.perf_counter() - t)
    return rate


def time_log(path: str, values: list[bytes], batch: bool) -> float:
    t = time.perf_counter()
    with CommitLog.open(path, flush="none") as log:
        if batch:
            log.append_batch(values)
        else:
            append = log.append
            for v in values:
                append(v)
        assert log.end_offset == len(values)
    return len(values) / (time.perf_counter() - t)


def main() -> int:
    workdir = tempfile.mkdtemp(prefix="bench-store-")
    values = make_values(N)
    peer = batch = single = 0.0
    try:
        for r in range(ROUNDS):
            peer = max(peer, time_queuelib(os.path.join(workdir, f"q{r}"), values))
            batch = max(batch, time_log(os.path.join(workdir, f"b{r}"), values, True))
            single = max(single, time_log(os.path.join(workdir, f"s{r}"), values, False))
            for name in (f"q{r}", f"b{r}", f"s{r}"):
                shutil.rmtree(os.path.join(workdir, name), ignore_errors=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    ratio = batch / peer
    print(f"baseline  queuelib FifoDiskQueue.push, 1 M x 100 B:  {peer / 1e6:.2f} M records/s")
    print(f"figure    CommitLog.append_batch, 1 M x 100 B:       {batch / 1e6:.2f} M records/s")
    print(f"          CommitLog.append, one call per record:     {single / 1e6:.2f} M records/s "
          f"({single / peer:.2f}x queuelib)")
    print(f"ratio     {ratio:.2f}x queuelib (target >= 3x)")
    print(f"FIGURE vs_queuelib {batch / 1e6:.2f} Mrec/s baseline=queuelib_push:{peer / 1e6:.2f}Mrec/s "
          f"ratio={ratio:.2f} target=3x {'met' if ratio >= 3 else 'MISSED'}")
    print(f"FIGURE vs_queuelib_single_append {single / 1e6:.2f} Mrec/s "
          f"baseline=queuelib_push:{peer / 1e6:.2f}Mrec/s ratio={single / peer:.2f} (informative)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
