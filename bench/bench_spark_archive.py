"""A Spark read of a staging log from its archive tier, against Parquet read from the same tier, in
the same run and session.

5 M rows of (bigint, double, 16-character string) are staged in a log (`commitlog.spark.write`,
16 MiB segments), every sealed segment is archived to a directory tier and evicted from the log
(the unarchived tail stays local), and the same rows are written as Parquet into the tier's
directory. Reads go through every row and column to the `noop` sink:

- `commitlog.spark.read(spark, path, archive=URL)`: the archived partitions are read from the
  archive by the Python readers (range reads, any host), the tail locally;
- `spark.read.parquet(<tier>/parquet)`.

An S3 tier is not measured here: Spark reads Parquet from S3 through hadoop-aws, which PySpark does
not ship, so the two would not read from the same tier. Each figure is the median of ROUNDS
interleaved rounds (the best round beside).

Environment: BENCH_ROWS (default 5000000), BENCH_ROUNDS (5), BENCH_DIR (scratch directory).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_spark_vs_parquet import ROUNDS, ROWS, measure, session  # noqa: E402

from commitlog import CommitLog  # noqa: E402
from commitlog.archive import LogArchive, open_tier, upload_sealed  # noqa: E402


def main() -> int:
    spark = session()
    tmp = tempfile.mkdtemp(prefix="bench-spark-archive-", dir=os.environ.get("BENCH_DIR"))
    import commitlog.spark
    try:
        df = spark.range(ROWS, numPartitions=2).selectExpr(
            "id AS k", "rand(7) AS x", "substr(sha2(cast(id AS string), 256), 1, 16) AS s").cache()
        df.count()
        log, tier_dir = os.path.join(tmp, "log"), os.path.join(tmp, "tier")
        url = f"file://{tier_dir}"
        commitlog.spark.write(df, log, segmentSize="16MiB")
        df.write.parquet(os.path.join(tier_dir, "parquet"))
        with CommitLog.open(log, readonly=True) as handle:
            sealed = [s for s in handle.segments() if not s.active]
            upload_sealed(LogArchive(open_tier(url), log), sealed, now_ms=int(time.time() * 1000))
            for _ in sealed:
                handle.remove_head()
            local = sum(s.used_bytes for s in handle.segments())
        archived = sum(s.used_bytes for s in sealed)
        print(f"{ROWS} rows: {len(sealed)} segments archived and evicted ({archived / 2**20:.0f} MiB), "
              f"{local / 2**20:.1f} MiB local; Parquet {_size(os.path.join(tier_dir, 'parquet')) / 2**20:.0f} MiB")

        def noop(frame) -> None:
            frame.write.format("noop").mode("overwrite").save()

        runs = {"parquet": lambda: noop(spark.read.parquet(os.path.join(tier_dir, "parquet"))),
                "archive": lambda: noop(commitlog.spark.read(spark, log, archive=url))}
        for run in runs.values():       # warm both once
            run()
        samples: dict[str, list[tuple[float, float]]] = {k: [] for k in runs}
        for _ in range(ROUNDS):
            for name, run in runs.items():
                samples[name].append(measure(run))
        p, a = (statistics.median(s for s, _ in samples[k]) for k in ("parquet", "archive"))
        best = max(pw / aw for (pw, _), (aw, _) in zip(samples["parquet"], samples["archive"]))
        pc, ac = (statistics.median(c for _, c in samples[k]) for k in ("parquet", "archive"))
        print(f"read (noop sink): parquet from the tier {p:.2f} s ({pc:.2f} CPU s), commitlog.spark.read "
              f"from the archive {a:.2f} s ({ac:.2f} CPU s): {p / a:.2f} x Parquet (best round {best:.2f})")
        return 0
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def _size(directory: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(directory) for f in files)


if __name__ == "__main__":
    sys.exit(main())
