"""Where a stream's time goes: `readStream.format("commitlog")` against `readStream.parquet` of the
same rows to a noop sink (Trigger.AvailableNow), each micro-batch's `durationMs` from Spark's
progress events summed by phase (latestOffset, getBatch, queryPlanning, addBatch, walCommit,
commitOffsets), the number and size of micro-batches, and the CPU seconds of the JVM and of the
Python workers, for each source: the JVM reader (`commitlog`) and the Python data source alone
(`commitlog_python`). One run after a warm-up on a small slice; the first step of
making streams as fast as Parquet is to know which phase to attack.

Run: .venv/bin/python bench/profile_spark_stream.py   (BENCH_ROWS, default 5000000; BENCH_DIR)
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from bench_spark_vs_parquet import session, tree_cpu_by_kind  # noqa: E402  (the speed bench's session and CPU reader)

ROWS = int(os.environ.get("BENCH_ROWS", 5_000_000))


def profile(spark, frame, checkpoint: str) -> dict:
    before, start = tree_cpu_by_kind(os.getpid()), time.perf_counter()
    query = (frame.writeStream.format("noop").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    wall = time.perf_counter() - start
    after = tree_cpu_by_kind(os.getpid())
    assert query.exception() is None
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    phases: dict[str, int] = {}
    for p in query.recentProgress:
        for phase, ms in p["durationMs"].items():
            phases[phase] = phases.get(phase, 0) + ms
    rows = sum(p["numInputRows"] for p in progress)
    assert rows == ROWS, f"read {rows} rows, not {ROWS}"
    return {"wall": wall, "batches": len(progress), "rows": rows, "phases": phases,
            "cpu": {k: after[k] - before[k] for k in after}}


def main() -> int:
    spark = session()
    tmp = tempfile.mkdtemp(prefix="profile-stream-", dir=os.environ.get("BENCH_DIR"))
    import commitlog.spark
    try:
        df = spark.range(ROWS, numPartitions=2).selectExpr(
            "id AS k", "rand(7) AS x", "substr(sha2(cast(id AS string), 256), 1, 16) AS s").cache()
        assert df.count() == ROWS
        parquet, log = os.path.join(tmp, "p"), os.path.join(tmp, "l")
        df.write.parquet(parquet)
        commitlog.spark.write(df, log)
        sources = {"parquet": lambda: spark.readStream.schema(df.schema).parquet(parquet),
                   "commitlog": lambda: spark.readStream.format("commitlog").option("path", log).load(),
                   "commitlog_python": lambda: spark.readStream.format("commitlog_python")
                   .option("path", log).load()}
        for name, source in sources.items():   # warm-up: JIT, workers
            (source().limit(10).writeStream.format("noop")
             .option("checkpointLocation", os.path.join(tmp, "warm-" + name))
             .trigger(availableNow=True).start().awaitTermination())
        results = {name: profile(spark, source(), os.path.join(tmp, "cp-" + name))
                   for name, source in sources.items()}
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{ROWS:,} rows to noop, Trigger.AvailableNow, one run each")
    for name, r in results.items():
        print(f"{name:16} {r['wall']:6.2f} s wall, {ROWS / r['wall'] / 1e6:5.2f} M rows/s, {r['batches']} "
              f"micro-batch(es) of {r['rows'] // max(1, r['batches']):,} rows; CPU jvm {r['cpu']['jvm']:.2f} s, "
              f"python {r['cpu']['python']:.2f} s")
        print("           phases (ms, summed over batches): " +
              ", ".join(f"{k} {v}" for k, v in sorted(r["phases"].items(), key=lambda kv: -kv[1])))
    p = results["parquet"]
    for name in ("commitlog", "commitlog_python"):
        c = results[name]
        print(f"FIGURE stream_{name}_vs_parquet {c['wall']:.2f} s baseline=parquet:{p['wall']:.2f}s "
              f"ratio={p['wall'] / c['wall']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
