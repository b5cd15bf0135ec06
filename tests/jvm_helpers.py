"""The Java flags of every Spark JVM a test starts: drivers (PySpark's gateway, a test's own driver
process), executors and a cluster rig's daemons run with the C1 compiler only and the serial
collector. Test JVMs live seconds to a minute; C2 compiling and a parallel collector's threads cost
them about half their CPU on a 2-core machine (docs/development.md, "Running the tests") and
change nothing a test checks.

`use_test_spark_conf` points SPARK_CONF_DIR at a directory of its own whose spark-defaults.conf
sets the flags as Spark's *default* Java options, which a session's own `extraJavaOptions` add to
rather than replace. Child processes inherit it; a test that builds a user's environment from
nothing (tests/packaging) does not."""

from __future__ import annotations

import os
from pathlib import Path

TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def use_test_spark_conf(conf_dir: Path) -> None:
    """Write conf_dir/spark-defaults.conf and set SPARK_CONF_DIR to conf_dir in this process."""
    conf_dir.mkdir(parents=True, exist_ok=True)
    lines = [f"spark.{role}.defaultJavaOptions {TEST_JVM_OPTIONS}" for role in ("driver", "executor")]
    (conf_dir / "spark-defaults.conf").write_text("\n".join(lines) + "\n")
    os.environ["SPARK_CONF_DIR"] = str(conf_dir)
