"""The data source named `commitlog`: the entry point Spark instantiates from the options."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.types import StructType

from .staging_errors import OptionError, OverwriteNotSupportedError
from .jvm import install as install_jvm
from .progress import install as install_progress
from .source_options import Options
from .reading.reader import CommitLogBatchReader
from .schema import arrow_schema, check_readable, log_schema, required_schema, stored_schema
from .writing.sink import CommitLogStreamWriter
from .reading.cluster_stream import stream_reader
from .writing.target import prepare_write
from .writing.batch_writer import CommitLogBatchWriter
from .cluster.cluster_writer import ClusterBatchWriter, prepare as prepare_cluster
from .cluster.cluster_sink import ClusterStreamWriter


class CommitLogDataSource(DataSource):
    """`format("commitlog")`: batch and streaming reads and writes of a commit log that stages
    DataFrames as Arrow IPC records. Options are parsed, and rejected, on the driver."""

    @classmethod
    def name(cls) -> str:
        return "commitlog"

    def __init__(self, options) -> None:
        super().__init__(options)
        self.parsed = Options.parse(options)

    # ------------------------------------------------------------------ schema
    def schema(self) -> StructType:
        """The log's recorded schema (only called when the reader gives none)."""
        return required_schema(self.parsed)

    def _read_schema(self, schema: StructType):
        stored = log_schema(self.parsed)
        if stored is not None:
            check_readable(stored, schema, self.parsed.path)
        return arrow_schema(schema)

    # ------------------------------------------------------------------ reading
    def reader(self, schema: StructType) -> CommitLogBatchReader:
        return CommitLogBatchReader(self.parsed, self._read_schema(schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """A cluster log's stream reads its tier (reading.cluster_stream), on any host."""
        return stream_reader(self.parsed, self._read_schema(schema))

    # ------------------------------------------------------------------ writing
    def writer(self, schema: StructType, overwrite: bool) -> CommitLogBatchWriter | ClusterBatchWriter:
        """With `archive`, a cluster write through the tier (commitlog.spark.cluster), from any host."""
        self._refuse_overwrite(overwrite)
        if self.parsed.archive is not None:
            return ClusterBatchWriter(prepare_cluster(self.parsed, schema))
        return CommitLogBatchWriter(prepare_write(self.parsed, schema, "batch"))

    def streamWriter(self, schema: StructType, overwrite: bool) -> CommitLogStreamWriter | ClusterStreamWriter:
        """With `archive`, each micro-batch is a cluster job through the tier (cluster.cluster_sink)."""
        self._refuse_overwrite(overwrite)
        sink_id = self.parsed.sink_id
        if sink_id is None:
            raise OptionError(
                f"the streaming sink into commit log {self.parsed.path} needs option "
                f"checkpointLocation (or sinkId) to stage each micro-batch exactly once across "
                f"restarts")
        if self.parsed.archive is not None:
            return ClusterStreamWriter(prepare_cluster(self.parsed, schema), sink_id)
        return CommitLogStreamWriter(prepare_write(self.parsed, schema, "stream", sink_id), sink_id)

    def _refuse_overwrite(self, overwrite: bool) -> None:
        if overwrite:
            raise OverwriteNotSupportedError(
                f'commit log {self.parsed.path} is append-only: mode("overwrite") is not '
                f'supported; use mode("append")')


_REGISTERED = "_commitlog_sources_registered"     # a session flag: its Python sources are registered


def register(spark) -> type[CommitLogDataSource]:
    """Register the `commitlog` data source on the SparkSession `spark` (the JVM reader when its
    jar is built: it takes the name for reads, see commitlog.spark.jvm), and the listener that
    commits a stream's consumer group once its sink committed a batch (once per session);
    returns the Python source's class. `format("commitlog_python")` names the Python data source
    alone, reads included."""
    if not getattr(spark, _REGISTERED, False):
        _register_python(spark, CommitLogDataSource)
        _register_python(spark, PythonReaderDataSource)
        setattr(spark, _REGISTERED, True)
    install_jvm(spark)
    install_progress(spark)
    return CommitLogDataSource


class PythonReaderDataSource(CommitLogDataSource):
    """`format("commitlog_python")`: the Python data source under a name the JVM reader does not
    take, for comparing the readers and as the documented fallback."""

    @classmethod
    def name(cls) -> str:
        return "commitlog_python"


def _register_python(spark, source: type[DataSource]) -> None:
    """Register the Python data source `source` on `spark`. In a driver JVM where an earlier
    session loaded the JVM reader's jar, Spark finds that reader under the name `commitlog` and
    refuses a Python source of the same name (DATA_SOURCE_ALREADY_EXISTS), though the first
    session registered both; the JVM reader's writes need the Python one. Then it is registered
    with the session's data source manager directly, which is what `register` does after its check."""
    try:
        spark.dataSource.register(source)
        return
    except Exception as exc:  # noqa: BLE001 - pyspark raises its own AnalysisException type here
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(exc) or source.name() != CommitLogDataSource.name():
            raise
    from pyspark.sql.udf import _wrap_function

    sc = spark.sparkContext
    builder = sc._jvm.org.apache.spark.sql.execution.datasources.v2.python.UserDefinedPythonDataSource(
        _wrap_function(sc, source))
    spark._jsparkSession.sessionState().dataSourceManager().registerDataSource(source.name(), builder)
