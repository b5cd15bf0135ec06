"""A Spark read of a staging log from its archive tier, by each route a read can take, against
Parquet read from the same directory tier, in the same run and session.

5 M rows of (bigint, double, 16-character string) are staged in a log (`commitlog.spark.write`,
16 MiB segments); a copy of the log is made, every sealed segment of the log is archived to a
directory tier and of the copy to an S3 tier (moto's server on loopback), and both evict them
(the unarchived tail stays local); the same rows are written as Parquet into the directory tier.
Reads go through every row and column to the `noop` sink, in interleaved rounds:

- `parquet`: `spark.read.parquet(<tier>/parquet)`, the baseline;
- `jvm`: `commitlog.spark.read(spark, path, archive=file://...)`: the JVM reader, archived
  partitions read as files and checked whole (SHA-256) in the tasks' JVM;
- `python`: `format("commitlog_python")` with the same tier: the Python reader's range reads;
- `python_s3`: `format("commitlog")` with the S3 tier: the route the JVM source takes there (the
  Python data source, boto3 range reads).

Each figure is the median of ROUNDS rounds (the best round beside), rows/s and the ratio to a
baseline of the same rounds: Parquet; for `jvm` also `python` (the two readers of one tier); for
`python_s3`, `python` (the same reader from the directory). Spark cannot read
Parquet from S3 here (hadoop-aws is not shipped), so S3 has no Parquet baseline.

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

import commitlog.spark  # noqa: E402
from commitlog import CommitLog  # noqa: E402
from commitlog.archive import LogArchive, open_tier, upload_sealed  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from archive_helpers import BUCKET, CREDENTIALS, S3Server  # noqa: E402


def main() -> int:
    os.environ.update(CREDENTIALS)           # before the driver JVM starts: its workers inherit them
    server = S3Server().start()
    server.make_bucket()
    spark = session()
    tmp = tempfile.mkdtemp(prefix="bench-spark-archive-", dir=os.environ.get("BENCH_DIR"))
    try:
        log, tier_dir, s3_url = os.path.join(tmp, "log"), os.path.join(tmp, "tier"), f"s3://{BUCKET}/bench"
        url = f"file://{tier_dir}"
        stage(spark, log, os.path.join(tier_dir, "parquet"))
        shutil.copytree(log, os.path.join(tmp, "log_s3"))
        archive_and_evict(log, open_tier(url))
        archive_and_evict(os.path.join(tmp, "log_s3"), open_tier(s3_url, endpoint=server.endpoint))
        s3 = {"archive": s3_url, "archiveEndpoint": server.endpoint}

        def noop(frame) -> None:
            frame.write.format("noop").mode("overwrite").save()

        def source(name: str, path: str, options: dict):
            reader = spark.read.format(name).option("path", path)
            for key, value in options.items():
                reader = reader.option(key, value)
            return reader.load()

        runs = {"parquet": lambda: noop(spark.read.parquet(os.path.join(tier_dir, "parquet"))),
                "jvm": lambda: noop(commitlog.spark.read(spark, log, archive=url)),
                "python": lambda: noop(source("commitlog_python", log, {"archive": url})),
                "python_s3": lambda: noop(source("commitlog", os.path.join(tmp, "log_s3"), s3))}
        report(rounds(runs), [("jvm", "parquet"), ("python", "parquet"), ("jvm", "python"),
                              ("python_s3", "python")])
        return 0
    finally:
        spark.stop()
        server.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def stage(spark, log: str, parquet: str) -> None:
    df = spark.range(ROWS, numPartitions=2).selectExpr(
        "id AS k", "rand(7) AS x", "substr(sha2(cast(id AS string), 256), 1, 16) AS s").cache()
    df.count()
    commitlog.spark.write(df, log, segmentSize="16MiB")
    df.write.parquet(parquet)


def archive_and_evict(log: str, tier) -> None:
    with CommitLog.open(log, readonly=True) as handle:
        sealed = [s for s in handle.segments() if not s.active]
        upload_sealed(LogArchive(tier, log), sealed, now_ms=int(time.time() * 1000))
        for _ in sealed:
            handle.remove_head()
        local = sum(s.used_bytes for s in handle.segments())
    print(f"{tier.url}: {ROWS} rows, {len(sealed)} segments archived and evicted "
          f"({sum(s.used_bytes for s in sealed) / 2**20:.0f} MiB), {local / 2**20:.1f} MiB local")


def rounds(runs: dict) -> dict[str, list[tuple[float, float]]]:
    """Every run once to warm up, then ROUNDS interleaved rounds: (seconds, CPU seconds) each."""
    for run in runs.values():
        run()
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in runs}
    for n in range(ROUNDS):
        for name, run in runs.items():
            samples[name].append(measure(run))
        print(f"round {n + 1}: " + ", ".join(f"{k} {v[-1][0]:.2f} s" for k, v in samples.items()), flush=True)
    return samples


def report(samples: dict[str, list[tuple[float, float]]], pairs: list[tuple[str, str]]) -> None:
    """A FIGURE line per (route, baseline): the route's rows/s and its speed over the baseline's."""
    for name, base in pairs:
        wall = statistics.median(s for s, _ in samples[name])
        cpu = statistics.median(c for _, c in samples[name])
        ratio = statistics.median(samples[base][i][0] / samples[name][i][0] for i in range(ROUNDS))
        best = max(b / s for (b, _), (s, _) in zip(samples[base], samples[name]))
        print(f"FIGURE spark_archive_{name}_vs_{base} {ROWS / wall / 1e6:.2f} M rows/s ({wall:.2f} s, {cpu:.2f} CPU s) "
              f"baseline={base}:{ROWS / statistics.median(s for s, _ in samples[base]) / 1e6:.2f}M rows/s "
              f"ratio={ratio:.2f} best={best:.2f}")


if __name__ == "__main__":
    sys.exit(main())
