"""The JVM reader: its jar, and putting it on a session.

`make` compiles jvm/src with the JDK against PySpark's own jars into commitlog/spark/jars/
commitlog-spark.jar (`python -m commitlog.spark.jvm build` does the same). `install(spark)` adds the
jar to the session (`ADD JAR`: the driver's and executors' class loaders) and gives the JVM the
planner it calls back (read_planner, through PySpark's Py4J callback server). A
session with the jar reads `format("commitlog")` in the JVM; without it (no JDK at install time,
or a Spark Connect session without Py4J), everything runs in the Python data source, as before.
"""

from __future__ import annotations

import glob
import logging
import os
import subprocess
import tempfile
import threading

log = logging.getLogger("commitlog.spark")

_SPARK_PACKAGE = os.path.dirname(os.path.dirname(__file__))
JAR = os.path.join(_SPARK_PACKAGE, "jars", "commitlog-spark.jar")
SOURCES = os.path.join(os.path.dirname(os.path.dirname(_SPARK_PACKAGE)), "jvm", "src")
_ATTR = "_commitlog_jvm_planner"
_lock = threading.Lock()


def available() -> bool:
    return os.path.isfile(JAR)


def installed(spark) -> bool:
    """Whether `spark` reads `format("commitlog")` with the JVM reader."""
    return getattr(spark, _ATTR, None) is not None


def install(spark) -> bool:
    """Add the jar and the planner to `spark` (once per session); False without the jar."""
    if not available():
        log.info("commitlog JVM reader not built (%s missing): the Python data source reads", JAR)
        return False
    with _lock:
        if installed(spark):
            return True
        from pyspark.java_gateway import ensure_callback_server_started

        from .read_planner import Planner   # imports pyspark: only once a session exists
        gateway = spark.sparkContext._gateway
        ensure_callback_server_started(gateway)
        spark.sql(f"ADD JAR '{JAR}'")
        planner = Planner()
        spark._jvm.commitlog.spark.jvm.Planners.install(planner)
        setattr(spark, _ATTR, planner)
        return True


def build(jar: str = JAR) -> str:
    """Compile jvm/src against PySpark's jars into `jar`; returns its path."""
    import pyspark
    spark_jars = os.path.join(os.path.dirname(pyspark.__file__), "jars", "*")
    sources = sorted(glob.glob(os.path.join(SOURCES, "**", "*.java"), recursive=True))
    if not sources:
        raise FileNotFoundError(f"no Java sources under {SOURCES}")
    with tempfile.TemporaryDirectory() as classes:
        subprocess.run(["javac", "-nowarn", "--release", "17", "-d", classes, "-cp", spark_jars,
                        *sources], check=True)
        services = os.path.join(classes, "META-INF", "services")
        os.makedirs(services)
        with open(os.path.join(services, "org.apache.spark.sql.sources.DataSourceRegister"), "w") as f:
            f.write("commitlog.spark.jvm.CommitLogProvider\n")
        os.makedirs(os.path.dirname(jar), exist_ok=True)
        tmp = jar + ".building"   # renamed into place whole
        subprocess.run(["jar", "cf", tmp, "-C", classes, "."], check=True)
        os.replace(tmp, jar)
    return jar

