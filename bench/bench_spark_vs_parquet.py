"""Staging a DataFrame in the commit log through `commitlog.spark`, against Parquet, in the same run,
same session, same disk.

5 M rows of (bigint, double, 16-character string), cached in memory first so every writer reads
the same rows at the same cost. Reads are forced through every row and column with the `noop` sink
(a count alone would let Parquet skip the columns). The session has Spark's default settings.

- write: `commitlog.spark.write(df, path)` and `df.write.format("commitlog")` (same default
  session) against `df.write.parquet`; target >= 1.0 x Parquet's speed for both.
- read: `commitlog.spark.read(spark, path)` against `spark.read.parquet`; target >= 1.2.
  `spark.read.format("commitlog")` (the JVM reader), target >= 1.0, and
  `format("commitlog_python")` (the Python data source alone) are printed beside.
- stream: `readStream.format("commitlog")` of the staged log to a noop sink (Trigger.AvailableNow)
  against `readStream.parquet` of the same rows, target >= 1.0; rows/s of both and their ratio,
  and the Python data source's stream (`commitlog_python`) beside.

Each figure is the median of ROUNDS rounds (the best round's ratio printed beside), the rounds
interleaving all formats (the machine is
shared and noisy); the CPU seconds of the whole process tree (driver JVM and python workers) are
printed beside, being less sensitive to other load. The log write is durable (each task
fdatasyncs its records before the job commits); Parquet's is not fsync'ed.

Environment: BENCH_ROWS (default 5000000), BENCH_ROUNDS (5), BENCH_DIR (scratch directory).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time

ROWS = int(os.environ.get("BENCH_ROWS", 5_000_000))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", 5))
TICK = os.sysconf("SC_CLK_TCK")


def session():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import commitlog.spark
    spark = (SparkSession.builder.master("local[2]").appName("bench-spark-vs-parquet")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.memory", "3g")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    commitlog.spark.register(spark)
    return spark


def tree_cpu_by_kind(root: int) -> dict[str, float]:
    """user + system CPU seconds of `root`'s descendants, live and reaped, split into the JVM
    (`jvm`) and the rest (`python`: the workers)."""
    parent, cpu, kind = {}, {}, {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                data = f.read()
            with open(f"/proc/{name}/cmdline", "rb") as f:
                program = f.read().split(b"\0")[0]
        except OSError:
            continue
        fields = data[data.rfind(")") + 2:].split()
        pid = int(name)
        parent[pid], cpu[pid] = int(fields[1]), sum(int(x) for x in fields[11:15])
        kind[pid] = "jvm" if b"java" in program else "python"
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    totals = {"jvm": 0.0, "python": 0.0}
    stack = list(children.get(root, ()))
    while stack:
        pid = stack.pop()
        totals[kind[pid]] += cpu[pid] / TICK
        stack.extend(children.get(pid, ()))
    return totals


def tree_cpu_seconds(root: int) -> float:
    """user + system CPU seconds of `root`'s descendants (the JVM, the python workers)."""
    return sum(tree_cpu_by_kind(root).values())


def measure(fn) -> tuple[float, float]:
    c0, t0 = tree_cpu_seconds(os.getpid()), time.perf_counter()
    fn()
    return time.perf_counter() - t0, tree_cpu_seconds(os.getpid()) - c0


def main() -> int:
    spark = session()
    tmp = tempfile.mkdtemp(prefix="bench-spark-", dir=os.environ.get("BENCH_DIR"))
    import commitlog.spark
    names = {"pw": "write parquet", "hw": "write commitlog.spark.write",
             "fw": "write format(commitlog)", "pr": "read parquet",
             "hr": "read commitlog.spark.read", "fr": "read format(commitlog)",
             "yr": "read format(commitlog_python)",
             "ps": "stream parquet", "fs": "stream commitlog", "ys": "stream commitlog_python"}
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in names}
    try:
        df = spark.range(ROWS, numPartitions=2).selectExpr(
            "id AS k", "rand(7) AS x", "substr(sha2(cast(id AS string), 256), 1, 16) AS s").cache()
        assert df.count() == ROWS
        sums = "sum(k)", "sum(x)", "sum(length(s))"

        def noop(frame) -> None:
            frame.write.format("noop").mode("overwrite").save()

        def stream(frame, checkpoint: str) -> None:
            query = (frame.writeStream.format("noop").option("checkpointLocation", checkpoint)
                     .trigger(availableNow=True).start())
            query.awaitTermination()
            assert query.exception() is None
            rows = sum(p["numInputRows"] for p in query.recentProgress)
            assert rows == ROWS, f"the stream read {rows} rows, not {ROWS}"

        ops = {
            "pw": lambda p: df.write.mode("errorifexists").parquet(p["p"]),
            "hw": lambda p: commitlog.spark.write(df, p["l"]),
            "fw": lambda p: df.write.format("commitlog").option("path", p["f"])
            .mode("append").save(),
            "pr": lambda p: noop(spark.read.parquet(p["p"])),
            "hr": lambda p: noop(commitlog.spark.read(spark, p["l"])),
            "fr": lambda p: noop(spark.read.format("commitlog").option("path", p["l"]).load()),
            "ps": lambda p: stream(spark.readStream.schema(df.schema).parquet(p["p"]), p["cp"]),
            "fs": lambda p: stream(spark.readStream.format("commitlog").option("path", p["l"])
                                   .load(), p["cl"]),
            # The Python data source alone (the readers before the JVM one), for comparison.
            "yr": lambda p: noop(spark.read.format("commitlog_python").option("path", p["l"]).load()),
            "ys": lambda p: stream(spark.readStream.format("commitlog_python").option("path", p["l"])
                                   .load(), p["cy"]),
        }

        # Warm up every path (JIT, python workers) on a small slice.
        small = df.limit(200_000)
        warm = {"p": os.path.join(tmp, "warm.parquet"), "l": os.path.join(tmp, "warm.log"),
                "cp": os.path.join(tmp, "warm.cp"), "cl": os.path.join(tmp, "warm.cl")}
        small.write.parquet(warm["p"])
        commitlog.spark.write(small, warm["l"])
        for key in ("pr", "hr", "fr", "yr"):
            ops[key](warm)
        spark.readStream.format("commitlog").option("path", warm["l"]).load() \
            .writeStream.format("noop").option("checkpointLocation", warm["cl"]) \
            .trigger(availableNow=True).start().awaitTermination()

        for r in range(ROUNDS):
            paths = {k: os.path.join(tmp, f"r{r}.{k}") for k in ("p", "l", "f", "cp", "cl", "cy")}
            for key in names:
                wall, cpu = measure(lambda: ops[key](paths))
                samples[key].append((wall, cpu))
                print(f"round {r} {names[key]:28s} {wall:.2f} s ({cpu:.2f} CPU s)", flush=True)
            if r == 0:
                want = spark.read.parquet(paths["p"]).selectExpr(*sums).collect()[0]
                for frame in (commitlog.spark.read(spark, paths["l"]),
                              spark.read.format("commitlog").option("path", paths["f"]).load()):
                    got = frame.selectExpr(*sums).collect()[0]
                    assert (got[0], got[2]) == (want[0], want[2]) and \
                        abs(got[1] - want[1]) < 1e-6 * ROWS, \
                        f"the log does not read back what was written: {got} != {want}"
                size_pq = sum(os.path.getsize(os.path.join(paths["p"], f))
                              for f in os.listdir(paths["p"]))
                size_lg = sum(s.used_bytes for s in _segments(paths["l"]))
            for p in paths.values():
                shutil.rmtree(p, ignore_errors=True)
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    # The median round of each path (wall and CPU seconds each their own median); the best beside.
    best = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
            for k, v in samples.items()}
    fastest = {k: min(w for w, _ in v) for k, v in samples.items()}
    rows = f"{ROWS / 1e6:g} M rows"
    ratio = {}
    for base, mine, what, target in (("pw", "hw", "write", 1.0), ("pw", "fw", "write", 1.0),
                                     ("pr", "hr", "read (noop sink)", 1.2),
                                     ("pr", "fr", "read (noop sink)", 1.0),
                                     ("pr", "yr", "read (noop sink)", None)):
        (pw, pc), (lw, lc) = best[base], best[mine]
        ratio[mine] = pw / lw
        goal = f" (target >= {target})" if target else ""
        print(f"{what:16s} {rows}: parquet {pw:.2f} s ({pc:.2f} CPU s), {names[mine][len(what.split()[0]) + 1:]} "
              f"{lw:.2f} s ({lc:.2f} CPU s); speed ratio {pw / lw:.2f}{goal}, CPU ratio {pc / lc:.2f}")
    (ps, psc) = best["ps"]
    for key in ("fs", "ys"):
        fs, fsc = best[key]
        ratio[key] = ps / fs
        print(f"stream to noop {rows}: readStream.parquet {ROWS / ps / 1e6:.2f} M rows/s ({psc:.2f} CPU s), "
              f"{names[key]} {ROWS / fs / 1e6:.2f} M rows/s ({fsc:.2f} CPU s); ratio {ps / fs:.2f}")
    print(f"bytes on disk: parquet {size_pq / 2**20:.0f} MiB, commitlog {size_lg / 2**20:.0f} MiB")
    for key, figure, base in (("hw", "spark_write_vs_parquet", "pw"),
                              ("fw", "spark_write_format_vs_parquet", "pw"),
                              ("hr", "spark_read_vs_parquet", "pr"),
                              ("fr", "spark_read_format_vs_parquet", "pr"),
                              ("yr", "spark_read_python_source_vs_parquet", "pr"),
                              ("fs", "spark_stream_vs_parquet", "ps"),
                              ("ys", "spark_stream_python_source_vs_parquet", "ps")):
        print(f"FIGURE {figure} {best[key][0]:.2f} s baseline=parquet:{best[base][0]:.2f}s "
              f"ratio={ratio[key]:.2f} (medians; best rounds {fastest[base] / fastest[key]:.2f})")
    ok = (ratio["hw"] >= 1.0 and ratio["fw"] >= 1.0 and ratio["hr"] >= 1.2 and ratio["fr"] >= 1.0
          and ratio["fs"] >= 1.0)
    print("targets met" if ok else "TARGET MISSED")
    return 0


def _segments(path: str):
    from commitlog import CommitLog
    with CommitLog.open(path, readonly=True) as log:
        return log.segments()


if __name__ == "__main__":
    sys.exit(main())
