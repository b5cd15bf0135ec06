"""Helpers shared by the Spark tests: staging, reading back, and looking inside the log."""

from __future__ import annotations

from commitlog import CommitLog
from commitlog.spark.schema import writer_of_key


# The source name reads use: "commitlog" (the JVM reader once register(spark) installed it) or
# "commitlog_python" (the Python data source); `both_readers` runs a module's tests with each.
SOURCE = "commitlog"
READERS = ("commitlog", "commitlog_python")


def stage(df, path: str, **options) -> None:
    """Append `df` to the log at `path` through the data source."""
    writer = df.write.format("commitlog").option("path", path).mode("append")
    for key, value in options.items():
        writer = writer.option(key, str(value))
    writer.save()


def load(spark, path: str, **options):
    reader = spark.read.format(SOURCE).option("path", path)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def read_stream(spark, path: str, **options):
    """`spark.readStream` of the log at `path` through the module's reader (SOURCE)."""
    reader = spark.readStream.format(SOURCE).option("path", path)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def spark_records(path: str) -> list[tuple[int, str]]:
    """(offset, writer id) of every record a Spark writer appended, visible, dead or marked dead
    (a scan passes over marked records: the store's record facts include them)."""
    with CommitLog.open(path, readonly=True) as log:
        return [(offset, writer_of_key(key)) for offset, key, _, _ in
                log.record_facts(log.marks_snapshot()) if writer_of_key(key) is not None]


def marked_offsets(path: str) -> list[int]:
    """Offsets the store holds marked dead (what a compaction drops)."""
    with CommitLog.open(path, readonly=True) as log:
        return [offset for offset, _, _, marked in log.record_facts(log.marks_snapshot()) if marked]


def ids(df, column: str = "id") -> list[int]:
    return sorted(r[0] for r in df.select(column).collect())
