"""A new Spark application on the cluster rig (test_spark_cluster.py): a process of its own, with its
own driver and executors, reading cluster logs through their tier as an application started after
an outage would.

    python cluster_app.py SPEC_JSON

SPEC_JSON: {"master", "conf" (the session's settings), "reads": [{"path", "options"}, ...]}.
Prints one JSON line per read: {"rows", "ids_sum", "distinct", "hosts"} (the hosts whose tasks
read the rows); exits 1 with the error on stderr when a read fails.
"""

from __future__ import annotations

import json
import os
import socket
import sys

import pyarrow as pa


def with_reader_host(batches):
    """The rows' ids with the reading task's host, for the driver to count."""
    for batch in batches:
        host = pa.array([socket.gethostname()] * batch.num_rows)
        yield pa.RecordBatch.from_arrays([batch.column("id"), host], names=["id", "reader"])


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
