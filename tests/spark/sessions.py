"""The test run's SparkSession: one SparkContext lives in a process at a time, so the local session
(`spark` fixture) and a cluster rig's session (`spark_cluster`) take turns. A switch stops the
session and its driver JVM (PySpark's gateway), and the next session starts a new one: a driver JVM
keeps the commitlog jar a session added (`ADD JAR`), and there `commitlog.spark.register` of a
later session fails (DATA_SOURCE_ALREADY_EXISTS: the name is the JVM reader's); spark-submit's
settings of the first session would also stay as the JVM's defaults. A switch costs a driver start
(seconds), so test modules of one kind run together."""

from __future__ import annotations

import os
import subprocess
import sys

from cluster_rig import CREDENTIALS, PYTHONPATH, ClusterRig

# Settings every test session has, local or on the cluster.
COMMON_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.streaming.stopTimeout": "30s",
    "spark.driver.extraJavaOptions": "-Dlog4j2.level=ERROR",
}


def cluster_conf(rig: ClusterRig) -> dict[str, str]:
    """The driver on the main host (127.0.0.1), executors on every worker host, one core each;
    jobs start once every worker host holds an executor."""
    hosts = len(rig.hosts)
    conf = {
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.executor.cores": "1",
        "spark.executor.memory": "512m",
        "spark.cores.max": str(hosts),
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "90s",
        "spark.default.parallelism": str(2 * hosts),
        "spark.executorEnv.PYTHONPATH": PYTHONPATH,
    }
    conf.update({f"spark.executorEnv.{name}": value for name, value in CREDENTIALS.items()})
    return conf


class Sessions:
    """Hands out the local session or a rig's session, stopping the one that held the context."""

    def __init__(self, warehouse: str) -> None:
        self.warehouse = warehouse
        self.current = None
        self.owner = None           # "local" or the ClusterRig the current session runs on

    def local(self):
        if self.owner != "local" or not self._alive():
            # Python workers reach a test's moto S3 server (archive_helpers) with its credentials.
            self._switch("local", "local[2]", {f"spark.executorEnv.{name}": value
                                               for name, value in CREDENTIALS.items()})
        return self.current

    def cluster(self, rig: ClusterRig):
        """The session on `rig` (started, its workers may still be starting): returns once every
        live host holds an executor."""
        if self.owner is not rig or not self._alive():
            self._switch(rig, rig.master_url, cluster_conf(rig))
            rig.session = self.current
            rig.wait_ready()
        return self.current

    def stop(self) -> None:
        """Stop the session and its driver JVM."""
        if self.current is not None:
            self.current.stop()
            if isinstance(self.owner, ClusterRig):
                self.owner.session = None
        self.current, self.owner = None, None
        _stop_gateway()

    def _alive(self) -> bool:
        return self.current is not None and self.current.sparkContext._jsc is not None

    def _switch(self, owner, master: str, conf: dict[str, str]) -> None:
        # Workers and the driver use this very interpreter (and so this environment's packages).
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession

        import commitlog.spark

        self.stop()
        builder = (SparkSession.builder.master(master).appName("commitlog-spark-tests")
                   .config("spark.sql.warehouse.dir", self.warehouse))
        for key, value in {**COMMON_CONF, **conf}.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        session.sparkContext.setLogLevel("ERROR")
        commitlog.spark.register(session)
        self.current, self.owner = session, owner


def _stop_gateway() -> None:
    """End PySpark's driver JVM (it exits when its stdin closes); the next SparkContext launches
    a new one."""
    from pyspark.core.context import SparkContext
    with SparkContext._lock:
        gateway, SparkContext._gateway, SparkContext._jvm = SparkContext._gateway, None, None
    if gateway is None:
        return
    gateway.shutdown()                  # the Py4J connections and the callback server
    proc = getattr(gateway, "proc", None)
    if proc is not None:
        proc.stdin.close()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
