"""Helpers shared by the Spark tests: staging, reading back, and looking inside the log."""

from __future__ import annotations

from commitlog import CommitLog
from commitlog.spark.schema import writer_of_key


def stage(df, path: str, **options) -> None:
    """Append `df` to the log at `path` through the data source."""
    writer = df.write.format("commitlog").option("path", path).mode("append")
    for key, value in options.items():
        writer = writer.option(key, str(value))
    writer.save()


def load(spark, path: str, **options):
    reader = spark.read.format("commitlog").option("path", path)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def spark_records(path: str) -> list[tuple[int, str]]:
    """(offset, writer id) of every record a Spark writer appended, visible or not."""
    with CommitLog.open(path, readonly=True) as log:
        return [(r.offset, writer_of_key(r.key)) for r in log.scan()
                if writer_of_key(r.key) is not None]


def ids(df, column: str = "id") -> list[int]:
    return sorted(r[0] for r in df.select(column).collect())
