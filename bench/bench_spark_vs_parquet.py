"""Staging a DataFrame in the commit log through the `commitlog` Spark data source, against
staging the same DataFrame as Parquet, in the same run, same session, same disk.

5 M rows of (bigint, double, 16-character string), cached in memory first so both writers read
the same rows at the same cost. Reads are forced through every row and column with the `noop`
sink (a count alone would let Parquet skip the columns), and also timed as a sum over all columns.

Targets: reading the staged log at least as fast as reading the Parquet copy (ratio >= 1.0), and
writing it at least 0.8 of Parquet's write speed. Each figure is the best of ROUNDS rounds, the
rounds interleaving both formats (the machine is shared and noisy); the CPU seconds of the whole
process tree (driver JVM and python workers) are printed beside, being less sensitive to other
load. The log write is durable (each task fdatasyncs its records before the job commits);
Parquet's is not fsync'ed.

The log is written twice a round: with Spark's default configuration, and with
commitlog.spark.RECOMMENDED_SPARK_CONF set on the session (spark.sql.execution.arrow.
maxBytesPerBatch=2147483647: Spark 4.3 otherwise sizes the Arrow batch bound for Python after
every row). That setting concerns only the JVM-to-Python Arrow transfer; Parquet does not use it.

Environment: BENCH_ROWS (default 5000000), BENCH_ROUNDS (5), BENCH_DIR (scratch directory).
"""

from __future__ import annotations

import os
import shutil
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


def tree_cpu_seconds(root: int) -> float:
    """user + system CPU of `root`'s descendants (the JVM, the python workers), live and reaped."""
    parent, cpu = {}, {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rfind(")") + 2:].split()
        parent[int(name)] = int(fields[1])
        cpu[int(name)] = sum(int(x) for x in fields[11:15])
    total, stack = 0, [root]
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    while stack:
        pid = stack.pop()
        if pid != root:
            total += cpu.get(pid, 0)
        stack.extend(children.get(pid, ()))
    return total / TICK


def measure(fn) -> tuple[float, float]:
    c0, t0 = tree_cpu_seconds(os.getpid()), time.perf_counter()
    fn()
    return time.perf_counter() - t0, tree_cpu_seconds(os.getpid()) - c0


def main() -> int:
    spark = session()
    tmp = tempfile.mkdtemp(prefix="bench-spark-", dir=os.environ.get("BENCH_DIR"))
    from commitlog.spark import RECOMMENDED_SPARK_CONF
    names = {"pw": "write parquet", "lw": "write commitlog", "lt": "write commitlog, tuned",
             "pr": "read parquet", "lr": "read commitlog", "ps": "sum parquet",
             "ls": "sum commitlog"}
    best = {k: (float("inf"), float("inf")) for k in names}
    try:
        df = spark.range(ROWS, numPartitions=2).selectExpr(
            "id AS k", "rand(7) AS x", "substr(sha2(cast(id AS string), 256), 1, 16) AS s").cache()
        assert df.count() == ROWS
        sums = "sum(k)", "sum(x)", "sum(length(s))"
        ops = {
            "pw": lambda p: df.write.mode("errorifexists").parquet(p),
            "lw": lambda p: df.write.format("commitlog").option("path", p).mode("append").save(),
            "lt": lambda p: tuned(lambda: ops["lw"](p)),
            "pr": lambda p: spark.read.parquet(p).write.format("noop").mode("overwrite").save(),
            "lr": lambda p: spark.read.format("commitlog").option("path", p).load()
            .write.format("noop").mode("overwrite").save(),
            "ps": lambda p: spark.read.parquet(p).selectExpr(*sums).collect(),
            "ls": lambda p: spark.read.format("commitlog").option("path", p).load()
            .selectExpr(*sums).collect(),
        }

        def tuned(fn):
            for key, value in RECOMMENDED_SPARK_CONF.items():
                spark.conf.set(key, value)
            try:
                fn()
            finally:
                for key in RECOMMENDED_SPARK_CONF:
                    spark.conf.unset(key)

        # Warm up both paths (JIT, python workers) on a small slice.
        small = df.limit(200_000)
        small.write.parquet(os.path.join(tmp, "warm.parquet"))
        small.write.format("commitlog").option("path", os.path.join(tmp, "warm.log")) \
            .mode("append").save()
        ops["pr"](os.path.join(tmp, "warm.parquet"))
        ops["lr"](os.path.join(tmp, "warm.log"))

        for r in range(ROUNDS):
            paths = {"p": os.path.join(tmp, f"r{r}.parquet"), "l": os.path.join(tmp, f"r{r}.log")}
            for key in ("pw", "lw", "lt", "pr", "lr", "ps", "ls"):
                if key == "lt":
                    shutil.rmtree(paths["l"])     # written again, tuned; read back below
                wall, cpu = measure(lambda: ops[key](paths[key[0]]))
                best[key] = (min(best[key][0], wall), min(best[key][1], cpu))
            if r == 0:
                got, want = ops["ls"](paths["l"])[0], ops["ps"](paths["p"])[0]
                assert (got[0], got[2]) == (want[0], want[2]) and abs(got[1] - want[1]) < 1e-6 * ROWS, \
                    f"the log does not read back what was written: {got} != {want}"
                size_pq = sum(os.path.getsize(os.path.join(paths["p"], f)) for f in os.listdir(paths["p"]))
                size_lg = sum(s.used_bytes for s in _segments(paths["l"]))
            for p in paths.values():
                shutil.rmtree(p, ignore_errors=True)
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    rows = f"{ROWS / 1e6:g} M rows"
    ratios = {}
    for op, what, target in (("w", "write, default conf", None), ("t", "write, tuned conf", 0.8),
                             ("r", "read (noop sink)", 1.0), ("s", "sum of all columns", None)):
        (pw, pc), (lw, lc) = best["pw" if op in "wt" else f"p{op}"], best[f"l{op}"]
        ratios[op] = pw / lw
        goal = f" (target >= {target})" if target else ""
        print(f"{what:21s} {rows}: parquet {pw:.2f} s ({pc:.2f} CPU s), commitlog {lw:.2f} s "
              f"({lc:.2f} CPU s); speed ratio {pw / lw:.2f}{goal}, CPU ratio {pc / lc:.2f}")
    print(f"bytes on disk: parquet {size_pq / 2**20:.0f} MiB, commitlog {size_lg / 2**20:.0f} MiB")
    print(f"FIGURE spark_write_vs_parquet {best['lt'][0]:.2f} s "
          f"baseline=parquet:{best['pw'][0]:.2f}s ratio={ratios['t']:.2f}")
    print(f"FIGURE spark_write_default_conf_vs_parquet {best['lw'][0]:.2f} s "
          f"baseline=parquet:{best['pw'][0]:.2f}s ratio={ratios['w']:.2f}")
    print(f"FIGURE spark_read_vs_parquet {best['lr'][0]:.2f} s "
          f"baseline=parquet:{best['pr'][0]:.2f}s ratio={ratios['r']:.2f}")
    ok = ratios["t"] >= 0.8 and ratios["r"] >= 1.0
    print("targets met" if ok else "TARGET MISSED")
    return 0


def _segments(path: str):
    from commitlog import CommitLog
    with CommitLog.open(path, readonly=True) as log:
        return log.segments()


if __name__ == "__main__":
    sys.exit(main())
