"""A new Spark application on the cluster rig (test_spark_cluster.py): a process of its own, with its
own driver and executors, reading cluster logs through their tier as an application started after
an outage would.

    python cluster_app.py SPEC_JSON

SPEC_JSON: {"master", "conf" (the session's settings), "writes": [{"path", "options", "rows",
"partitions", "marker"}, ...] (optional), "reads": [{"path", "options"}, ...]}. A write appends ids
[0, rows); its partition 0's first attempt stalls once it has given all its rows (a straggler, for
Spark's speculation to copy), and an attempt after it creates `marker` + its attempt number. Prints
one JSON line per read: {"rows", "ids_sum", "distinct", "hosts"} (the hosts whose tasks read the
rows); exits 1 with the error on stderr when a write or a read fails.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pyarrow as pa


def run_application(rig, spec: dict) -> list[dict]:
    """Run this module as an application of its own on `rig` (spec without "master") and return
    what it printed, a dict per read."""
    from archive_helpers import DIE_WITH_PARENT
    from cluster_rig import PYTHONPATH
    app = subprocess.run([*DIE_WITH_PARENT, sys.executable, os.path.abspath(__file__),
                          json.dumps({"master": rig.master_url, **spec})],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": PYTHONPATH})
    assert app.returncode == 0, app.stderr[-3000:]
    return [json.loads(line) for line in app.stdout.splitlines()]


def with_reader_host(batches):
    """The rows' ids with the reading task's host, for the driver to count."""
    for batch in batches:
        host = pa.array([socket.gethostname()] * batch.num_rows)
        yield pa.RecordBatch.from_arrays([batch.column("id"), host], names=["id", "reader"])


def straggling_first_attempt(marker: str):
    """Partition 0's first attempt stalls after its rows; a later attempt leaves a marker."""
    def transform(batches):
        import time

        from pyspark import TaskContext
        yield from batches
        context = TaskContext.get()
        if context.partitionId() == 0 and context.attemptNumber() == 0:
            time.sleep(120)
        elif context.partitionId() == 0:
            with open(f"{marker}{context.attemptNumber()}", "w") as f:
                f.write(socket.gethostname())
    return transform


def main(spec: dict) -> None:
    from pyspark.sql import SparkSession, functions

    import commitlog.spark

    os.environ.update({"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable})
    builder = SparkSession.builder.master(spec["master"]).appName("commitlog-new-application")
    for key, value in spec["conf"].items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    commitlog.spark.register(spark)
    for write in spec.get("writes", ()):
        df = spark.range(0, write["rows"], numPartitions=write["partitions"]).selectExpr("id")
        df = df.mapInArrow(straggling_first_attempt(write["marker"]), "id long")
        commitlog.spark.write(df, write["path"], **write["options"])
    for read in spec["reads"]:
        rows = commitlog.spark.read(spark, read["path"], **read["options"]).select("id")
        seen = rows.mapInArrow(with_reader_host, "id long, reader string")
        totals = seen.agg(functions.count("id"), functions.sum("id"), functions.countDistinct("id")).first()
        hosts = sorted(r.reader for r in seen.select("reader").distinct().collect())
        print(json.dumps({"rows": totals[0], "ids_sum": totals[1], "distinct": totals[2], "hosts": hosts}),
              flush=True)
    spark.stop()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
