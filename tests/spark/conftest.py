"""One local SparkSession for every Spark test of the run (starting one costs seconds)."""

from __future__ import annotations

import os
import sys

import pytest

pyspark = pytest.importorskip("pyspark")

from spark_helpers import READERS  # noqa: E402  (after the skip: it imports pyspark)


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    # Workers and the driver use this very interpreter (and so this environment's packages).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import commitlog.spark

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = (SparkSession.builder
               .master("local[2]")
               .appName("commitlog-spark-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.warehouse.dir", str(warehouse))
               .config("spark.sql.streaming.stopTimeout", "30s")
               .config("spark.driver.extraJavaOptions", "-Dlog4j2.level=ERROR")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    commitlog.spark.register(session)
    yield session
    session.stop()


@pytest.fixture
def log_path(tmp_path):
    """A path (not yet created) for a staging log."""
    return str(tmp_path / "staging")


@pytest.fixture(params=READERS)
def both_readers(request, monkeypatch):
    """Run a test with the JVM reader (`format("commitlog")`) and with the Python data source
    (`format("commitlog_python")`): spark_helpers.load and read_stream read through it."""
    import spark_helpers
    monkeypatch.setattr(spark_helpers, "SOURCE", request.param)
    return request.param
