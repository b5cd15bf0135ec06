"""The wheel a user installs with pip: `python -m build` of the tracked sources makes a wheel that
carries the JVM reader's jar (compiled when the wheel is built) and the package data, and nothing of
the tests or the Java sources; installed with its spark and archive extras into a fresh environment,
in a directory with no source tree, the README's Python block, `retention serve --demo` and the
README's Spark block run, Spark reading with the JVM reader on a Java runtime alone (no JDK). A
host without a JDK builds the wheel without the jar, and says so in one line."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import zipfile
from pathlib import Path

import pytest
import yaml

from test_docs import blocks, free_port
from wheel_helpers import (ROOT, build, constraints, copy_tracked_sources, fresh_venv, java_runtime_home,
                           path_without_jdk, user_env)

pytestmark = pytest.mark.timeout(900)   # one build and one install of PySpark, shared by the module
JAR = "commitlog/spark/jars/commitlog-spark.jar"
# Appended to the README's Spark block: which reader read, and from where the package was imported.
OBSERVE = """
import json
import commitlog.spark.jvm
plan = commitlog.spark.read(spark, "data/events")._jdf.queryExecution().executedPlan().toString()
print(json.dumps({"jvm_reader": commitlog.spark.jvm.installed(spark), "jar": commitlog.spark.jvm.JAR,
                  "python_scan": "(Python)" in plan or "MapInArrow" in plan, "package": commitlog.__file__}))
"""


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("wheel")


@pytest.fixture(scope="module")
def wheel(work) -> Path:
    source = copy_tracked_sources(work / "src")
    build(source, work / "dist", user_env(os.environ["PATH"]))
    (found,) = (work / "dist").glob("*.whl")
    return found


@pytest.fixture(scope="module")
def venv_bin(work, wheel) -> Path:
    return fresh_venv(work / "venv", wheel, "spark,archive", constraints(work / "constraints.txt"))


@pytest.fixture(scope="module")
def host(work, venv_bin) -> dict:
    """A user's shell on a host with a Java runtime and no JDK, the fresh environment first on PATH."""
    path = os.pathsep.join([str(venv_bin), str(work / "jre" / "bin"), path_without_jdk(work / "host-bin")])
    java_home = java_runtime_home(work / "jre")
    home = work / "home"
    home.mkdir()
    return user_env(path, JAVA_HOME=str(java_home), HOME=str(home))


@pytest.fixture
def cwd(tmp_path) -> Path:
    """A working directory with no source tree in it or above it."""
    assert not any((parent / "pyproject.toml").exists() for parent in [tmp_path, *tmp_path.parents])
    return tmp_path


def readme_python(spark: bool) -> str:
    found = blocks((ROOT / "README.md").read_text())
    return next(body for lang, _, body in found if lang == "python" and ("commitlog.spark" in body) == spark)


def test_the_wheel_carries_the_jar_and_the_package_data_and_no_tests_or_java_sources(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert JAR in names
    assert {"retention/conf/retention.yaml", "retention/conf/demo.yaml"} <= set(names)
    assert "retention/web/static/status.html" in names
    assert not [n for n in names if n.startswith(("tests/", "jvm/", "build_backend/")) or n.endswith(".java")]
    with zipfile.ZipFile(wheel).open(JAR) as jar, zipfile.ZipFile(jar) as classes:
        assert "commitlog/spark/jvm/CommitLogProvider.class" in classes.namelist()
        service = "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"
        assert classes.read(service).decode().strip() == "commitlog.spark.jvm.CommitLogProvider"


def test_the_readme_python_block_runs_from_the_installed_wheel(venv_bin, host, cwd):
    done = subprocess.run([str(venv_bin / "python"), "-c", readme_python(spark=False)], cwd=cwd, env=host,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[0] == "0 b'hello'"
    assert (cwd / "data" / "app" / "meta.json").is_file()


def _installed_package(venv_bin: Path, host: dict, cwd: Path, name: str) -> Path:
    done = subprocess.run([str(venv_bin / "python"), "-c", f"import {name}; print({name}.__file__)"], cwd=cwd,
                          env=host, capture_output=True, text=True, timeout=60, check=True)
    return Path(done.stdout.strip()).parent


def demo_config(package: Path, port: int) -> str:
    """What `retention serve --demo` runs (the wheel's embedded default with its demo log added,
    retention.service.demo), listening on `port`."""
    merged = yaml.safe_load((package / "conf" / "retention.yaml").read_text())
    demo = yaml.safe_load((package / "conf" / "demo.yaml").read_text())
    for section in ("logs", "policies"):
        merged[section].update(demo[section])
    merged["service"]["listen"] = f"127.0.0.1:{port}"
    return yaml.safe_dump(merged, sort_keys=False)


def test_retention_serve_demo_runs_from_the_installed_wheel(venv_bin, host, cwd):
    package = _installed_package(venv_bin, host, cwd, "retention")
    assert package.is_relative_to(venv_bin.parent), package          # the wheel's, not a checkout's
    port = free_port()
    (cwd / "demo.yaml").write_text(demo_config(package, port))
    server = subprocess.Popen(["retention", "serve", "--demo", "--config", "demo.yaml"], cwd=cwd, env=host,
                              start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        done = subprocess.run(["retention", "status", "--url", f"127.0.0.1:{port}", "--wait", "60", "--json"],
                              cwd=cwd, env=host, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        status = json.loads(done.stdout)
        assert {log["name"] for log in status["logs"]} == {"staging", "demo"}
        assert status["healthy"] is True
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        said = server.communicate(timeout=30)[1]
    assert server.returncode == 0, said[-3000:]
    assert "| ERROR |" not in said and "Traceback" not in said, said[-3000:]
    assert (cwd / "data" / "demo" / "log" / "meta.json").is_file()    # the demo writer wrote


def test_the_readme_spark_block_reads_with_the_jvm_reader_on_a_java_runtime(venv_bin, host, cwd):
    assert shutil.which("javac", path=host["PATH"]) is None
    assert os.listdir(Path(host["JAVA_HOME"]) / "bin") == ["java"]          # a runtime, no compiler
    done = subprocess.run([str(venv_bin / "python"), "-c", readme_python(spark=True) + OBSERVE], cwd=cwd, env=host,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    *_, count, observed = done.stdout.strip().splitlines()
    assert count == "1000"
    observed = json.loads(observed)
    assert observed["jvm_reader"] is True and observed["python_scan"] is False, observed
    assert Path(observed["jar"]).is_relative_to(venv_bin.parent) and Path(observed["jar"]).is_file()
    assert Path(observed["package"]).is_relative_to(venv_bin.parent), observed["package"]


def test_a_host_without_a_jdk_builds_the_wheel_without_the_jar_and_says_so_in_one_line(tmp_path):
    source = copy_tracked_sources(tmp_path / "src")
    done = build(source, tmp_path / "dist", user_env(path_without_jdk(tmp_path / "bin")), "--wheel")
    said = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("commitlog-retention:")]
    assert len(said) == 1 and "no JDK" in said[0] and "no JVM reader" in said[0], said
    (found,) = (tmp_path / "dist").glob("*.whl")
    names = zipfile.ZipFile(found).namelist()
    assert JAR not in names and "retention/web/static/status.html" in names
    assert "- pyspark" not in done.stdout                  # not asked for: nothing to compile against
