"""Faults of cluster writes that only a task's own code can place exactly (test_spark_cluster.py).

`format("commitlog_staged_then_dying")` is the `commitlog` data source whose cluster writer lets
the first task attempt of a job (the one that creates the file named by option `marker`
exclusively, on a directory every host sees) stage its rows on the tier as usual and then kill
its Python worker before the task reports: its staged objects are complete on the tier, and no
commit message names them. The attempt's id is written to the marker file. Register with
`register(spark)`: the class is pickled by value, so no Python process needs this module.
"""

from __future__ import annotations

import os

from commitlog.spark.cluster.cluster_writer import ClusterBatchWriter
from commitlog.spark.source import CommitLogDataSource

NAME = "commitlog_staged_then_dying"


class StagedThenDyingWriter(ClusterBatchWriter):
    def __init__(self, target, marker: str) -> None:
        super().__init__(target)
        self.marker = marker

    def write(self, iterator):
        message = super().write(iterator)          # every staged object uploaded, verified
        try:
            fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return message
        os.write(fd, message.attempt_id.encode())
        os.fsync(fd)
        os.close(fd)
        os._exit(9)                                # the worker dies before the task reports


class StagedThenDyingSource(CommitLogDataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def writer(self, schema, overwrite):
        writer = super().writer(schema, overwrite)
        assert isinstance(writer, ClusterBatchWriter), "option archive is needed"
        return StagedThenDyingWriter(writer.target, self.options["marker"])


def register(spark) -> None:
    import sys

    from pyspark import cloudpickle
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(StagedThenDyingSource)
