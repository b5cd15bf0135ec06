"""The Java flags of every Spark JVM a test starts: drivers (PySpark's gateway, a test's own driver
process), executors and a cluster rig's daemons run with the C1 compiler only and the serial
collector, and map the run's class-data archive of Spark's classes when `make` built it. Test JVMs
live seconds to a minute; C2 compiling and a parallel collector's threads cost them about half
their CPU on a 2-core machine, and loading and verifying Spark's classes a third of what is left
(docs/development.md, "Running the tests"); none of it changes what a test checks.

`use_test_spark_conf` writes the flags as Spark's *default* Java options into a properties file
of the run's own and points spark-submit at it (PYSPARK_SUBMIT_ARGS), so a session's own
`extraJavaOptions` add to them rather than replace them. SPARK_CONF_DIR is one empty directory
(SPARK_CONF): Spark puts it on every JVM's class path, and a class-data archive maps only into a
JVM whose class path is the one it was dumped with, empty directories included. Child processes
inherit both; a test that builds a user's environment from nothing (tests/packaging) does not.

`python tests/jvm_helpers.py` dumps the archive (`make test` does, once per install): a local
session runs a small job with `-XX:ArchiveClassesAtExit`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

_VENV = Path(__file__).resolve().parents[1] / ".venv"
CDS_ARCHIVE = _VENV / "spark-test-classes.jsa"     # a build product of `make test`, like the jar
SPARK_CONF = _VENV / "spark-test-conf"              # empty: every Spark JVM's SPARK_CONF_DIR
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"      # an archive a JVM cannot map is skipped unsaid


def spark_jvm_options() -> str:
    """The flags of every Spark JVM a test starts: TEST_JVM_OPTIONS, and the class-data archive
    when it was built."""
    if CDS_ARCHIVE.is_file():
        return f"{TEST_JVM_OPTIONS} -XX:SharedArchiveFile={CDS_ARCHIVE} {_QUIET}"
    return TEST_JVM_OPTIONS


def use_test_spark_conf(conf_dir: Path) -> None:
    """Write conf_dir/spark-test.conf and point this process's Spark at it and at SPARK_CONF."""
    _write_conf(conf_dir, spark_jvm_options())


def _write_conf(conf_dir: Path, options: str) -> None:
    conf_dir.mkdir(parents=True, exist_ok=True)
    SPARK_CONF.mkdir(parents=True, exist_ok=True)
    lines = [f"spark.{role}.defaultJavaOptions {options}" for role in ("driver", "executor")]
    (conf_dir / "spark-test.conf").write_text("\n".join(lines) + "\n")
    os.environ["SPARK_CONF_DIR"] = str(SPARK_CONF)
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"--properties-file {conf_dir / 'spark-test.conf'} pyspark-shell"


_DUMP_JOB = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
df = spark.range(0, 1000)
df.groupBy((df.id % 7).alias("k")).count().collect()
spark.stop()
"""


def dump_archive(archive: Path) -> None:
    """Run a small local job whose driver JVM writes the class-data archive `archive` at exit."""
    import tempfile
    archive.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="spark-cds-") as scratch:
        _write_conf(Path(scratch), f"{TEST_JVM_OPTIONS} -XX:ArchiveClassesAtExit={archive} {_QUIET}")
        done = subprocess.run([sys.executable, "-c", _DUMP_JOB], capture_output=True, text=True,
                              timeout=300, env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    if done.returncode != 0 or not archive.is_file():
        sys.exit(f"jvm_helpers: no class-data archive written to {archive}: {done.stderr[-2000:]}")


if __name__ == "__main__":
    dump_archive(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else CDS_ARCHIVE)
