"""Lookup by time: offset_for_time against read(offset) on the same log, and a 1 GiB log against
a 64 MiB one.

Target: a lookup costs at most 5 times a read of one record by offset (both find a segment and
an index entry, then scan at most one index interval; the lookup also reads the headers its
binary searches land on), and the 1 GiB log's lookup at most 2 times the 64 MiB log's (it grows
with log segments, not with data). Each log has 4 MiB segments of 100-byte records whose
timestamps rise by one millisecond per batch of 100; a writer handle in this process, warm. The figure
is the best of five rounds of 2,000 random lookups, interleaved with the reads.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import tempfile
import time

from commitlog import CommitLog

SEGMENT = 4 << 20
VALUE = b"r" * 100
ROUNDS, LOOKUPS = 5, 2000


BATCH = 100                 # records of one batch share a timestamp; the next batch's is 1 ms later
BASE_TS = 1_000_000


def fill(path: str, size: int) -> CommitLog:
    log = CommitLog.open(path, segment_size=SEGMENT, flush="none")
    for k in range(size // ((len(VALUE) + 21) * BATCH)):
        log.append_batch([VALUE] * BATCH, timestamp_ms=BASE_TS + k)
    return log


def per_call(func, args: list) -> float:
    started = time.perf_counter()
    for a in args:
        func(a)
    return (time.perf_counter() - started) / len(args)


def main() -> int:
    root = tempfile.mkdtemp(prefix="bench-time-lookup-")
    try:
        small = fill(os.path.join(root, "small"), 64 << 20)
        large = fill(os.path.join(root, "large"), 1 << 30)
        rng = random.Random(7)
        best = {"lookup_small": 1e9, "lookup_large": 1e9, "read_large": 1e9}
        for _ in range(ROUNDS):
            end_small, end_large = small.end_offset, large.end_offset
            stamps_small = [BASE_TS + rng.randrange(end_small // BATCH) for _ in range(LOOKUPS)]
            stamps_large = [BASE_TS + rng.randrange(end_large // BATCH) for _ in range(LOOKUPS)]
            offsets = [rng.randrange(end_large) for _ in range(LOOKUPS)]
            best["read_large"] = min(best["read_large"], per_call(large.read, offsets))
            best["lookup_large"] = min(best["lookup_large"], per_call(large.offset_for_time, stamps_large))
            best["lookup_small"] = min(best["lookup_small"], per_call(small.offset_for_time, stamps_small))
        assert large.offset_for_time(BASE_TS + 12345) == 12345 * BATCH
        segments = len(large.segments()), len(small.segments())
        small.close()
        large.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    us = {k: v * 1e6 for k, v in best.items()}
    vs_read = us["lookup_large"] / us["read_large"]
    vs_small = us["lookup_large"] / us["lookup_small"]
    print(f"1 GiB log ({segments[0]} segments): offset_for_time {us['lookup_large']:.1f} us, "
          f"read(offset) {us['read_large']:.1f} us, ratio {vs_read:.2f} (target <= 5)")
    print(f"64 MiB log ({segments[1]} segments): offset_for_time {us['lookup_small']:.1f} us; "
          f"1 GiB / 64 MiB {vs_small:.2f} (target <= 2)")
    print(f"FIGURE time_lookup_1GiB {us['lookup_large']:.1f} us baseline=read_offset:{us['read_large']:.1f}us "
          f"ratio={vs_read:.2f} target<=5 {'met' if vs_read <= 5 else 'MISSED'}")
    print(f"FIGURE time_lookup_1GiB_vs_64MiB {us['lookup_large']:.1f} us baseline=lookup_64MiB:"
          f"{us['lookup_small']:.1f}us ratio={vs_small:.2f} target<=2 {'met' if vs_small <= 2 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
