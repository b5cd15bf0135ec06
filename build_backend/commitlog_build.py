"""The project's PEP 517 build backend: setuptools', plus the JVM reader's jar in the wheel.

A wheel build on a host with a JDK (`javac` and `jar` on PATH) asks for PySpark in its build
environment and compiles jvm/src against PySpark's jars into the wheel's build directory
(commitlog/spark/jars/commitlog-spark.jar; never into the source tree). Without a JDK the wheel
builds without the jar and says so in one line: its Spark reads then run in the Python data
source. Editable installs (`make`) leave the jar to `make jar`. Design: docs/development.md,
"Installing from a wheel".
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403 (every other hook is setuptools')
from setuptools.command.build_py import build_py

SPARK_REQUIREMENT = "pyspark>=4,<5"        # the project's spark extra: the jars the jar links against
JAR_IN_PACKAGE = ("commitlog", "spark", "jars", "commitlog-spark.jar")
JVM_MODULE = ("commitlog", "spark", "jvm", "__init__.py")   # where build() lives, with jvm/src beside


def jdk_available() -> bool:
    return shutil.which("javac") is not None and shutil.which("jar") is not None


def get_requires_for_build_wheel(config_settings=None):
    requires = _setuptools.get_requires_for_build_wheel(config_settings)
    return requires + [SPARK_REQUIREMENT] if jdk_available() else requires


def _jvm_module(source_root: str):
    """commitlog/spark/jvm of the tree being built, loaded alone (the package's own imports need
    dependencies a build environment does not have)."""
    spec = importlib.util.spec_from_file_location("_commitlog_jvm_build", os.path.join(source_root, *JVM_MODULE))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _without_jar(jar: str, why: str) -> None:
    if os.path.exists(jar):
        os.remove(jar)          # a jar left in build/ by an earlier build with a JDK
    print(f"commitlog-retention: {why}, so this wheel has no JVM reader and its Spark reads run in "
          "the Python data source (much slower); install a JDK 17 and build again", file=sys.stderr, flush=True)


class BuildPy(build_py):
    """setuptools' build_py, then the JVM reader's jar compiled into the build directory."""

    def run(self):
        super().run()
        if self.editable_mode:
            return
        jar = os.path.join(self.build_lib, *JAR_IN_PACKAGE)
        if not jdk_available():
            _without_jar(jar, "no JDK here (javac and jar on PATH)")
            return
        if importlib.util.find_spec("pyspark") is None:
            _without_jar(jar, "PySpark is not in the build environment (a build without isolation)")
            return
        _jvm_module(os.path.abspath(self.distribution.src_root or os.curdir)).build(jar)
        print(f"commitlog-retention: the JVM reader compiled into {jar}", file=sys.stderr, flush=True)
