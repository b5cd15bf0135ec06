"""Time-based rolls: what roll_after costs the append path, and what a time roll costs.

1. append(100 B) with roll_after set (never due during the run) against the same appends without
   it, interleaved rounds, best of each: the hot path's one extra comparison.
2. A time roll (ActiveSegment.seal_short: sync the data, seal the index, cut the file) of a 64 MiB
   segment holding 64 KiB, against a size roll of the same segment full (seal, then the next
   segment from the prepared one), best of several.

Target: appends with roll_after at least 0.95 of those without.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time

from commitlog import CommitLog

N = 1_000_000
ROUNDS = 3
SEGMENT = 64 << 20
VALUE = b"v" * 100


def append_rate(workdir: str, r: int, roll_after: float | None) -> float:
    path = os.path.join(workdir, f"log-{r}-{roll_after}")
    with CommitLog.open(path, flush="none", roll_after=roll_after) as log:
        append = log.append
        t = time.perf_counter()
        for _ in range(N):
            append(VALUE)
        rate = N / (time.perf_counter() - t)
        assert log.end_offset == N and len(log.segments()) == 2
    shutil.rmtree(path)
    return rate


def time_roll_ms(workdir: str, r: int) -> float:
    path = os.path.join(workdir, f"roll-{r}")
    with CommitLog.open(path, SEGMENT, flush="none", roll_after=3600) as log:
        log.append_batch([VALUE] * 540)                       # 64 KiB of records
        t = time.perf_counter()
        log._writer.seal_by_time(time.time_ns())
        took = time.perf_counter() - t
        assert os.path.getsize(os.path.join(path, "00000000000000000000.log")) < SEGMENT
    shutil.rmtree(path)
    return took * 1000


def size_roll_ms(workdir: str, r: int) -> float:
    path = os.path.join(workdir, f"size-{r}")
    with CommitLog.open(path, SEGMENT, flush="none") as log:
        big = b"x" * (1 << 20)
        while len(log.segments()) < 2:
            log.append(big)                                    # the second segment is prepared
        log._writer.preallocator.wait_idle()
        while log.segments()[-1].used_bytes + len(big) + 21 <= SEGMENT:
            log.append(big)
        t = time.perf_counter()
        log._writer.roll(len(big) + 21)
        took = time.perf_counter() - t
    shutil.rmtree(path)
    return took * 1000


def main() -> int:
    workdir = tempfile.mkdtemp(prefix="bench-roll-")
    try:
        without = with_roll = 0.0
        for r in range(ROUNDS):
            without = max(without, append_rate(workdir, r, None))
            with_roll = max(with_roll, append_rate(workdir, r, 3600.0))
        seal = min(time_roll_ms(workdir, r) for r in range(5))
        size = min(size_roll_ms(workdir, r) for r in range(3))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    ratio = with_roll / without
    print(f"baseline  append(100 B) without roll_after: {without / 1e6:.2f} M records/s")
    print(f"figure    append(100 B) with roll_after:    {with_roll / 1e6:.2f} M records/s ({ratio:.2f}x)")
    print(f"          a time roll of a 64 MiB segment holding 64 KiB: {seal:.2f} ms; "
          f"a size roll of a full one: {size:.2f} ms")
    met = ratio >= 0.95
    print(f"FIGURE append_with_roll_after {ratio:.2f}x baseline=append_without:{without / 1e6:.2f}Mrec/s "
          f"time_roll={seal:.2f}ms size_roll={size:.2f}ms target=0.95x {'met' if met else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
