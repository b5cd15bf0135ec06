"""A streaming query in its own process whose driver is SIGKILLed at the worst moment: after the
sink committed its batch (Spark's commit log has it) and before the progress listener commits the
consumer group. The listener's commit is replaced here, in this driver, by one that says where it
is (MARKER) and then blocks until the process is killed. The hour-long trigger keeps Spark from
planning a second batch (the source commits a batch's end when it plans the next one).

usage: progress_child.py SOURCE_LOG CHECKPOINT MARKER
"""

from __future__ import annotations

import os
import sys
import time

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

from pyspark.sql import SparkSession  # noqa: E402

import commitlog.spark  # noqa: E402
from commitlog.spark import progress  # noqa: E402


def main(source: str, checkpoint: str, marker: str) -> None:
    def blocked_commit(path: str, group: str, offset: int, tier: dict | None = None) -> None:
        with open(marker, "w") as f:
            f.write(f"{path} {group} {offset}\n")
        while True:
            time.sleep(60)

    progress.commit_group = blocked_commit
    spark = (SparkSession.builder.master("local[2]").appName("progress-child")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    commitlog.spark.register(spark)
    query = (spark.readStream.format("commitlog").option("path", source).option("group", "etl")
             .load().writeStream.format("noop").option("checkpointLocation", checkpoint)
             .trigger(processingTime="1 hour").start())   # plans no second batch meanwhile
    query.awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:4])
