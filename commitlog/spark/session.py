"""`register(spark)`: what a session needs to use commit logs.

- The Python data source `commitlog` (commitlog.spark.source): writes, and every path when the
  JVM reader is missing.
- The JVM reader (commitlog.spark.jvm), when its jar was built: added to the session, it takes
  the name `commitlog` (Spark looks a name up among the JVM's sources before Python's), reads
  batches and streams as columnar batches, and hands writes to the Python data source.
- The listener that commits a stream's consumer group once its sink committed a batch.
"""

from __future__ import annotations

from .jvm import install as install_jvm
from .progress import install as install_progress
from .source import CommitLogDataSource, PythonReaderDataSource

_ATTR = "_commitlog_sources_registered"


def register(spark) -> type[CommitLogDataSource]:
    """Register the `commitlog` data source on the SparkSession `spark` (the JVM reader when its
    jar is there), and the progress listener (once per session); returns the Python source's
    class. `format("commitlog_python")` names the Python data source alone, reads included."""
    if not getattr(spark, _ATTR, False):
        spark.dataSource.register(CommitLogDataSource)
        spark.dataSource.register(PythonReaderDataSource)
        setattr(spark, _ATTR, True)
    install_jvm(spark)
    install_progress(spark)
    return CommitLogDataSource
