"""A streaming query in its own process, for the test that SIGKILLs it mid-stream:
commitlog source (one record per micro-batch) -> commitlog sink.

usage: sink_child.py SOURCE_LOG SINK_LOG CHECKPOINT
"""

from __future__ import annotations

import os
import sys

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

from pyspark.sql import SparkSession  # noqa: E402

import commitlog.spark  # noqa: E402


def main(source: str, sink: str, checkpoint: str) -> None:
    spark = (SparkSession.builder.master("local[2]").appName("sink-child")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    commitlog.spark.register(spark)
    query = (spark.readStream.format("commitlog").option("path", source)
             .option("maxRowsPerTrigger", "1").load()
             .writeStream.format("commitlog").option("path", sink)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    print("query started", flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:4])
