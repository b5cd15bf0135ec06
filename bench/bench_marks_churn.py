"""The marks file over simulated weeks of churn: is it bounded by what is live?

A pipeline staging 500 records (100 B) an hour into a log of 1 MiB segments aborts a job every
hour whose 100 records lie scattered among them (`mark_dead` of 100 lone offsets: 100 entries).
Retention keeps a week of segments (remove_head), a compaction drops the marked records of the
sealed segments once a simulated day. 10,000 hours (about 60 weeks) make a million marks.
The same run is made with the marks file never rewritten (the store before it was bounded) as the
baseline; both in this process, one after the other.

Run: .venv/bin/python bench/bench_marks_churn.py [--hours H]
Prints, for both: the marks file's size at the end and at most, its entries, the run's time.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import time

from commitlog import CommitLog
from commitlog.cleanup import deadrecords, rewrite

PER_HOUR, MARKED, WEEK = 500, 100, 168
SEGMENT = 1 << 20


def churn(path: str, hours: int) -> dict:
    rng = random.Random(7)
    biggest = 0
    started = time.perf_counter()
    with CommitLog.open(path, segment_size=SEGMENT, flush="none") as log:
        marks_file = os.path.join(path, "marks")
        for hour in range(hours):
            first = log.append_batch([b"v" * 100] * PER_HOUR)
            log.mark_dead(sorted(rng.sample(range(first, first + PER_HOUR), MARKED)))
            segments = log.segments()
            while len(segments) > 1 and log.end_offset - segments[1].base_offset > WEEK * PER_HOUR:
                log.remove_head()
                segments = segments[1:]
            if hour % 24 == 23:
                dirty = [[s.base_offset] for s in log.segments()[:-1] if s.live_bytes < s.used_bytes]
                log.compact(dirty, lambda o, k, t, marked: "dead" if marked else None)
            biggest = max(biggest, os.path.getsize(marks_file))
        entries = len(log._segs.marks.entries())
        return {"size": os.path.getsize(marks_file), "biggest": biggest, "entries": entries,
                "marks": hours * MARKED, "seconds": time.perf_counter() - started}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hours", type=int, default=10_000)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="marks-churn-")
    try:
        bounded = churn(os.path.join(work, "bounded"), args.hours)
        shutil.rmtree(os.path.join(work, "bounded"))
        # The baseline: the same run with the rewrite disabled where it is triggered.
        never = lambda *a, **k: None  # noqa: E731
        saved = (rewrite.shrink_marks, deadrecords.shrink_marks)
        rewrite.shrink_marks = deadrecords.shrink_marks = never
        try:
            growing = churn(os.path.join(work, "growing"), args.hours)
        finally:
            rewrite.shrink_marks, deadrecords.shrink_marks = saved
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for name, r in (("never rewritten", growing), ("bounded", bounded)):
        print(f"{name:16} {r['marks']:>9,} marks: file {r['size'] / 1024:,.0f} KiB at the end, "
              f"{r['biggest'] / 1024:,.0f} KiB at most, {r['entries']:,} entries, {r['seconds']:.1f} s")
    print(f"ratio (bounded / never rewritten, final size): {bounded['size'] / growing['size']:.4f}")


if __name__ == "__main__":
    main()
