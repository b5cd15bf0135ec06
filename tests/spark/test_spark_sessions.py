"""A driver that stops its session and starts another (a notebook, a job runner) registers the
data source again and reads and writes through it.

Before: once a session had added the JVM reader's jar, the next session of the same driver JVM
could not register the Python data source the JVM reader hands its writes to (Spark took the jar's
reader for a source of the same name: DATA_SOURCE_ALREADY_EXISTS)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from commitlog.spark import jvm

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent("""
    import json, os, sys
    from pyspark.sql import SparkSession
    import commitlog.spark
    from commitlog.spark import jvm
    out = []
    for i in range(3):
        s = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.driver.extraJavaOptions", "-Dlog4j2.level=ERROR").getOrCreate())
        commitlog.spark.register(s)
        s.range(10).toDF("id").write.format("commitlog").mode("append").save(sys.argv[1])
        out.append({"jvm_reader": jvm.installed(s),
                    "rows": s.read.format("commitlog").load(sys.argv[1]).count()})
        s.stop()
    print(json.dumps(out))
""")


@pytest.mark.spark
def test_a_second_and_third_session_in_one_driver_register_write_and_read(tmp_path):
    if not jvm.available():
        pytest.skip("the JVM reader's jar is not built (make jar): the case needs it")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "log")], capture_output=True, text=True,
                          timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    sessions = json.loads(done.stdout.strip().splitlines()[-1])
    assert sessions == [{"jvm_reader": True, "rows": 10 * (i + 1)} for i in range(3)]
