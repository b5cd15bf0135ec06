"""The Spark tests' sessions: one local session for the run (starting one costs seconds), and one
multi-host cluster rig for the run, handed to every module that asks for it."""

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


@pytest.fixture(scope="session")
def shared_rig(spark_sessions, tmp_path_factory, pytestconfig):
    """The process's one cluster rig, started on first use (shared_rig.py)."""
    from shared_rig import KEY, SharedRig
    holder = pytestconfig.stash[KEY] = SharedRig(spark_sessions, tmp_path_factory)
    try:
        yield holder
    finally:
        del pytestconfig.stash[KEY]
        holder.stop()


@pytest.fixture(scope="module")
def spark_cluster(shared_rig):
    """A Spark standalone cluster of worker hosts in their own namespaces, with moto's S3 server
    and a shared `file://` directory (cluster_rig.py), and the driver's session connected to it:
    `spark_cluster.session` (a test on the cluster never asks for `spark`: that would switch back).
    One rig for the process, handed to each module as a fresh start would leave it (shared_rig.py)."""
    from cluster_rig import unavailable_reason
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    return shared_rig.for_module()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """Once the next test does not ask for the rig (or none is left), the rig stops: its JVMs do
    not idle through the rest of the run."""
    yield
    from shared_rig import KEY
    holder = item.config.stash.get(KEY, None)
    if holder is not None and (nextitem is None or "spark_cluster" not in nextitem.fixturenames):
        holder.stop()


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
