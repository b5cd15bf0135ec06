"""Cluster writes and reads through the archive tier (docs/spark-cluster.md) on the multi-host
rig (tests/spark/cluster_rig.py: a standalone master, two worker hosts in namespaces of their own,
one executor of one core and 1 GiB on each, moto's S3 server, a shared directory), against
baselines run by the same cluster session in the same rounds.

BENCH_ROWS rows of (bigint, double, 16-character string) in 4 partitions, cached in the executors
first. Per round, interleaved:

- `parquet_write` / `parquet_read`: `df.write.parquet` / `spark.read.parquet` on the shared
  directory, the baselines of the directory tier;
- `file_write` / `file_read`: `commitlog.spark.write(df, path, archive="file://<shared>")` and
  `commitlog.spark.read(spark, path, archive=...)` (the JVM reader);
- `s3_write` / `s3_read`: the same with `archive="s3://..."` on moto (the Python data source reads);
- `boto3_put` / `boto3_get`: a Spark job of as many tasks as the S3 write had, each putting with a
  bare boto3 client objects of the sizes its attempt staged (the same count and bytes) / getting
  the objects an attempt staged whole: the baselines of the S3 tier.

Reads go through every row and column to the `noop` sink. A warm-up round (not counted) prints
the hosts each step's tasks ran on and checks the reads return what Parquet does; every round
says whether each step's tasks ran on every host (an executor lost under load, say, breaks that). Each figure:
rows/s of the median round, the median of the rounds' ratios to the baseline, the best beside.

Environment: BENCH_ROWS (default 5000000), BENCH_ROUNDS (3), BENCH_DIR (scratch directory).
Needs root, unshare and nsenter (the rig's own requirements; prints why and exits 0 otherwise)
and the JVM reader's jar (make jar).
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request

ROWS = int(os.environ.get("BENCH_ROWS", 5_000_000))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", 3))
PARTITIONS = 4
LOCAL_DISK = "2g"                  # each worker host's tmpfs: a round's copies and private logs fit
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The repository first: its tests/commitlog folder must not pass for the commitlog package.
sys.path[:0] = [REPO, os.path.join(REPO, "tests"), os.path.join(REPO, "tests", "spark")]

from archive_helpers import CREDENTIALS, free_port  # noqa: E402
from cluster_rig import ClusterRig, unavailable_reason  # noqa: E402
from sessions import COMMON_CONF, cluster_conf  # noqa: E402

# (step, its baseline) in the order a round runs them; a baseline runs before what it measures.
STEPS = ("parquet_write", "file_write", "parquet_read", "file_read", "s3_write", "boto3_put",
         "s3_read", "boto3_get")
PAIRS = (("file_write", "parquet_write"), ("file_read", "parquet_read"),
         ("s3_write", "boto3_put"), ("s3_read", "boto3_get"))


def session(rig: ClusterRig, ui_port: int):
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import commitlog.spark
    conf = {**COMMON_CONF, **cluster_conf(rig), "spark.executor.memory": "1g",
            "spark.ui.enabled": "true", "spark.ui.port": str(ui_port),
            "spark.default.parallelism": str(PARTITIONS), "spark.sql.shuffle.partitions": str(PARTITIONS)}
    builder = SparkSession.builder.master(rig.master_url).appName("bench-spark-cluster")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    commitlog.spark.register(spark)
    rig.session = spark
    rig.wait_ready()
    return spark


class TaskHosts:
    """Tasks run per host since the last call, from the driver's REST API (executors' totals)."""

    def __init__(self, rig: ClusterRig, spark, ui_port: int) -> None:
        self.rig = rig
        self.url = (f"http://127.0.0.1:{ui_port}/api/v1/applications/"
                    f"{spark.sparkContext.applicationId}/executors")
        self.last = self._totals()

    def _totals(self) -> collections.Counter:
        with urllib.request.urlopen(self.url, timeout=10) as answer:
            executors = json.load(answer)
        return collections.Counter({self.rig.host_of_ip(e["hostPort"].rsplit(":", 1)[0]): e["totalTasks"]
                                    for e in executors if e["id"] != "driver"})

    def since(self) -> dict[str, int]:
        """Tasks per host since the previous call (waits for the listener to catch up)."""
        now, deadline = self._totals(), time.monotonic() + 5
        while time.monotonic() < deadline:
            time.sleep(0.5)
            again = self._totals()
            if again == now:
                break
            now = again
        ran, self.last = now - self.last, now
        return dict(sorted(ran.items()))


def s3_objects(endpoint: str, bucket: str, prefix: str) -> dict[str, list[tuple[str, int]]]:
    """The objects under `prefix`, (key, size), grouped by the attempt that staged them."""
    import boto3
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    groups: dict[str, list[tuple[str, int]]] = collections.defaultdict(list)
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", ()):
            groups[item["Key"][len(prefix):].split("/")[1]].append((item["Key"], item["Size"]))
    return dict(groups)


def s3_empty(endpoint: str, bucket: str) -> None:
    import boto3
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys = [{"Key": item["Key"]} for item in page.get("Contents", ())]
        if keys:
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys})


def bare_put(endpoint: str, bucket: str):
    def put(group: list[tuple[str, int]]) -> None:
        import boto3
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        for key, size in group:
            # Zeros, allocated untouched (microseconds): building the body costs the baseline nothing.
            client.put_object(Bucket=bucket, Key=f"bare/{key}", Body=bytes(size))
    return put


def bare_get(endpoint: str, bucket: str):
    def get(group: list[tuple[str, int]]) -> None:
        import boto3
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        for key, size in group:
            assert len(client.get_object(Bucket=bucket, Key=key)["Body"].read()) == size
    return get


def steps(spark, rig: ClusterRig, df, n: int) -> dict:
    """The round's steps (STEPS), each a function of no argument."""
    import commitlog.spark
    shared, local = rig.shared_dir, rig.local_root
    s3 = {"archive": f"s3://{rig.bucket}/bench", "archiveEndpoint": rig.s3_endpoint, "archiveRegion": "us-east-1"}
    parquet, file_log, s3_log = f"{shared}/parquet{n}", f"{local}/file{n}", f"{local}/s3log{n}"
    sc, staged = spark.sparkContext, {}

    def noop(frame) -> None:
        frame.write.format("noop").mode("overwrite").save()

    def s3_write() -> None:
        commitlog.spark.write(df, s3_log, **s3)
        staged.update(s3_objects(rig.s3_endpoint, rig.bucket, f"bench/s3log{n}/staged/"))

    def each_attempt(fn) -> None:
        groups = list(staged.values())
        sc.parallelize(groups, len(groups)).foreach(fn)

    return {"parquet_write": lambda: df.write.parquet(parquet),
            "file_write": lambda: commitlog.spark.write(df, file_log, archive=rig.shared_url),
            "parquet_read": lambda: noop(spark.read.parquet(parquet)),
            "file_read": lambda: noop(commitlog.spark.read(spark, file_log, archive=rig.shared_url)),
            "s3_write": s3_write,
            "boto3_put": lambda: each_attempt(bare_put(rig.s3_endpoint, rig.bucket)),
            "s3_read": lambda: noop(commitlog.spark.read(spark, s3_log, **s3)),
            "boto3_get": lambda: each_attempt(bare_get(rig.s3_endpoint, rig.bucket)),
            "_check": lambda: check(spark, parquet, [commitlog.spark.read(spark, file_log, archive=rig.shared_url),
                                                     commitlog.spark.read(spark, s3_log, **s3)]),
            "_staged": staged, "_check_cost": lambda: check_cost(rig.shared_url, f"file{n}")}


def check_cost(url: str, name: str) -> str:
    """What the commit's check of the staged objects costs on the driver (commit.check_staged:
    a directory tier's head reads and hashes each object)."""
    from commitlog.archive import open_tier
    tier = open_tier(url)
    keys = list(tier.keys(f"{name}/staged/"))
    t0 = time.perf_counter()
    for key in keys:
        tier.head(key)
    return f"{len(keys)} objects checked in {time.perf_counter() - t0:.2f} s"


def check(spark, parquet: str, frames) -> None:
    sums = "count(*)", "sum(k)", "sum(x)", "sum(length(s))"
    want = spark.read.parquet(parquet).selectExpr(*sums).collect()[0]
    for frame in frames:
        got = frame.selectExpr(*sums).collect()[0]
        assert (got[0], got[1], got[3]) == (want[0], want[1], want[3]) and abs(got[2] - want[2]) < 1e-6 * ROWS, \
            f"the log does not read back what Parquet holds: {got} != {want}"


def clean(rig: ClusterRig) -> None:
    """The round's objects, and the copies the hosts kept of what they staged (a sidecar would
    evict them; here each round starts from empty disks)."""
    for host in rig.hosts:
        rig.run_on(host, ["find", rig.local_root, "-mindepth", "1", "-delete"])
    for name in os.listdir(rig.shared_dir):
        shutil.rmtree(os.path.join(rig.shared_dir, name), ignore_errors=True)
    s3_empty(rig.s3_endpoint, rig.bucket)


def run_rounds(spark, rig: ClusterRig, df, hosts: TaskHosts) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {step: [] for step in STEPS}
    for n in range(ROUNDS + 1):                  # round 0 warms up, checks, and shows the hosts
        run, one_host = steps(spark, rig, df, n), []
        for step in STEPS:
            hosts.since()
            t0 = time.perf_counter()
            run[step]()
            took = time.perf_counter() - t0
            ran = hosts.since()
            if len(ran) < len(rig.hosts):
                one_host.append(f"{step} {ran}")
            if n == 0:
                print(f"warm-up {step}: {took:.2f} s, tasks per host {ran}", flush=True)
            else:
                samples[step].append(took)
        if n == 0:
            run["_check"]()
            count = sum(len(g) for g in run["_staged"].values())
            size = sum(s for g in run["_staged"].values() for _, s in g)
            print(f"the commit's check of the file write's staged objects, again: {run['_check_cost']()}")
            print(f"reads checked against Parquet; the S3 write staged {count} objects of "
                  f"{size / 2**20:.0f} MiB by {len(run['_staged'])} attempts", flush=True)
        else:
            print(f"round {n}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in samples.items()), flush=True)
        print(f"  tasks of every step on every host: {'yes' if not one_host else 'NO: ' + '; '.join(one_host)}")
        clean(rig)
    return samples


def report(samples: dict[str, list[float]]) -> None:
    for step, base in PAIRS:
        mine, theirs = samples[step], samples[base]
        ratio = statistics.median(b / s for b, s in zip(theirs, mine))
        best = max(b / s for b, s in zip(theirs, mine))
        wall, base_wall = statistics.median(mine), statistics.median(theirs)
        print(f"FIGURE spark_cluster_{step}_vs_{base} {ROWS / wall / 1e6:.2f} M rows/s ({wall:.2f} s) "
              f"baseline={base}:{ROWS / base_wall / 1e6:.2f}M rows/s ({base_wall:.2f} s) "
              f"ratio={ratio:.2f} best={best:.2f}")


def main() -> int:
    reason = unavailable_reason()
    if reason is not None:
        print(f"SKIPPED: {reason}")
        return 0
    os.environ.update(CREDENTIALS)          # the driver's own tier client (prepare, commit)
    base = tempfile.mkdtemp(prefix="bench-spark-cluster-", dir=os.environ.get("BENCH_DIR"))
    rig, spark, ui_port = ClusterRig(base, tmpfs_size=LOCAL_DISK), None, free_port()
    try:
        rig.start(wait=False)
        spark = session(rig, ui_port)
        hosts = TaskHosts(rig, spark, ui_port)
        df = spark.range(ROWS, numPartitions=PARTITIONS).selectExpr(
            "id AS k", "rand(7) AS x", "substr(sha2(cast(id AS string), 256), 1, 16) AS s").cache()
        assert df.count() == ROWS
        print(f"{ROWS} rows cached in {PARTITIONS} partitions, tasks per host {hosts.since()}", flush=True)
        report(run_rounds(spark, rig, df, hosts))
        print(f"load average: {open('/proc/loadavg').read().strip()}")
        return 0
    finally:
        if spark is not None:
            spark.stop()
        rig.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
