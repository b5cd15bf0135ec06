"""A second Spark driver for the cluster rig's tests (test_spark_cluster.py): a process of its own
with its own SparkSession, in local mode (`local[2]`: the rig's session holds every core of the
standalone master, so a second application there would wait for cores), writing rows to a cluster
log through the archive tier, as another host's driver would.

    python cluster_driver.py SPEC_JSON

SPEC_JSON: {"path", "options" (the write's options: archive, ...), "start", "rows",
"partitions"}: appends ids [start, start + rows). Prints "committed" and exits 0 once the write
returned; exit 1 with the error on stderr otherwise.
"""

from __future__ import annotations

import json
import os
import socket
import sys

import pyarrow as pa


def with_host(batches):
    """Spark's batches with the producing host's name as a `host` column."""
    for batch in batches:
        host = pa.array([socket.gethostname()] * batch.num_rows)
        yield pa.RecordBatch.from_arrays([*batch.columns, host], names=[*batch.schema.names, "host"])


def frame(spark, start: int, rows: int, partitions: int, transform=with_host):
    df = spark.range(start, start + rows, numPartitions=partitions).selectExpr("id", "cast(id as string) as s")
    return df.mapInArrow(transform, "id long, s string, host string")


def main(spec: dict) -> None:
    from sessions import COMMON_CONF

    from pyspark.sql import SparkSession

    import commitlog.spark
    from cluster_rig import CREDENTIALS

    os.environ.update({"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable})
    builder = SparkSession.builder.master("local[2]").appName("commitlog-second-driver")
    conf = {**COMMON_CONF, **{f"spark.executorEnv.{k}": v for k, v in CREDENTIALS.items()}}
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    df = frame(spark, spec["start"], spec["rows"], spec["partitions"])
    commitlog.spark.write(df, spec["path"], **spec["options"])
    print("committed", flush=True)
    spark.stop()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
