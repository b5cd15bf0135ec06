"""The Spark tests' sessions: one local session for the run (starting one costs seconds), and the
multi-host cluster rig per module that asks for it."""

from __future__ import annotations

import pytest

pyspark = pytest.importorskip("pyspark")

from spark_helpers import READERS  # noqa: E402  (after the skip: it imports pyspark)


@pytest.fixture(scope="session")
def spark_sessions(tmp_path_factory):
    """The run's one SparkContext, local or on a cluster rig (sessions.py)."""
    from sessions import Sessions
    sessions = Sessions(str(tmp_path_factory.mktemp("spark-warehouse")))
    yield sessions
    sessions.stop()


@pytest.fixture
def spark(spark_sessions):
    """The local[2] session (started once, or again after a cluster module stopped it)."""
    return spark_sessions.local()


@pytest.fixture(scope="module")
def spark_cluster(spark_sessions, tmp_path_factory):
    """A Spark standalone cluster of worker hosts in their own namespaces, with moto's S3 server
    and a shared `file://` directory (cluster_rig.py), and the driver's session connected to it:
    `spark_cluster.session` (a test on the cluster never asks for `spark`: that would switch back).
    Started per module, torn down after it, whatever the tests did."""
    from cluster_rig import ClusterRig, unavailable_reason
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    rig = ClusterRig(tmp_path_factory.mktemp("clrig"))
    try:
        rig.start(wait=False)        # the driver starts while the workers do
        spark_sessions.cluster(rig)
        yield rig
    finally:
        try:
            if spark_sessions.owner is rig:
                spark_sessions.stop()
        finally:
            rig.stop()


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
