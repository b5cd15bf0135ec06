"""A streaming driver for the cluster rig's tests (test_spark_cluster_streams.py): a process of its
own with its own SparkSession in local mode (the rig's session holds the master's every core),
streaming a local log into a cluster log through the archive tier with the commitlog sink, so that
a test can SIGKILL it after a micro-batch committed and run it again from its checkpoint.

    python cluster_sink_driver.py SPEC_JSON

SPEC_JSON: {"source", "sink", "checkpoint", "options" (the sink's: archive, ...), "rows",
"records"}. The first run stages ids [0, rows) into the local log `source` in `records` records;
every run streams it (one record per micro-batch, `availableNow`) into `sink`. Prints "done" and
exits 0 once the query finished.
"""

from __future__ import annotations

import json
import os
import sys


def main(spec: dict) -> None:
    from sessions import COMMON_CONF

    from pyspark.sql import SparkSession

    import commitlog.spark
    from cluster_rig import CREDENTIALS

    os.environ.update({"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable})
    builder = SparkSession.builder.master("local[2]").appName("commitlog-sink-driver")
    conf = {**COMMON_CONF, **{f"spark.executorEnv.{k}": v for k, v in CREDENTIALS.items()}}
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    commitlog.spark.register(spark)
    if not os.path.exists(spec["source"]):
        (spark.range(0, spec["rows"], numPartitions=spec["records"]).write.format("commitlog")
         .option("path", spec["source"]).mode("append").save())     # a record per partition
    query = (spark.readStream.format("commitlog").option("path", spec["source"])
             .option("maxRowsPerTrigger", "1").load()
             .writeStream.format("commitlog").option("path", spec["sink"]).options(**spec["options"])
             .option("checkpointLocation", spec["checkpoint"]).trigger(availableNow=True).start())
    print("query started", flush=True)
    commitlog.spark.await_termination(query)
    print("done", flush=True)
    spark.stop()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
