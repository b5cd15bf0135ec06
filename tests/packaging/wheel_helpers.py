"""A wheel built and installed the way a user does it: `python -m build` from a copy of the tracked
sources (nothing of the working tree's builds, jars or caches), then a fresh virtual environment
outside any source tree, and a host whose PATH holds a Java runtime but no JDK."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What a user's shell does not carry into a fresh environment: this checkout on the import path,
# this test run's virtual environment, its PySpark and Java settings.
_LEFT_OUT = re.compile(r"PYTHON.*|VIRTUAL_ENV|PYSPARK_.*|SPARK_.*|JAVA_HOME|CLASSPATH|_JAVA_OPTIONS|JDK_JAVA_OPTIONS")


def copy_tracked_sources(into: Path) -> Path:
    """The files git tracks (as they are in the working tree), copied to `into`."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    names = [name for name in listed.decode().split("\0") if name]
    assert "pyproject.toml" in names, f"{ROOT} is not a git checkout with the project tracked"
    for name in names:
        source = ROOT / name
        if source.is_file():            # a tracked file deleted in the working tree is left out
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    return into


def build(source: Path, out: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    """`python -m build` of `source` into `out` (this environment's build frontend, isolated)."""
    done = subprocess.run([sys.executable, "-m", "build", *args, "--outdir", str(out), str(source)], cwd=source,
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def constraints(path: Path) -> Path:
    """This environment's versions as pip constraints: the fresh install resolves what pip's cache
    already holds (frugal with the index, and the versions the other tests ran with)."""
    frozen = subprocess.run([sys.executable, "-m", "pip", "freeze", "--exclude", "commitlog-retention"],
                            capture_output=True, text=True, check=True).stdout
    path.write_text("".join(line + "\n" for line in frozen.splitlines() if re.fullmatch(r"[\w.\-]+==[\w.+!\-]+", line)))
    return path


def fresh_venv(where: Path, wheel: Path, extras: str, pins: Path) -> Path:
    """A new virtual environment at `where` with `wheel[extras]` installed by pip; its bin/."""
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=120)
    bin_dir = where / "bin"
    done = subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "--quiet", "--constraint", str(pins),
                           f"{wheel}[{extras}]"], cwd=where, env=user_env(os.environ["PATH"]),
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return bin_dir


def user_env(path: str, **extra: str) -> dict:
    """The environment of a user's shell with `path` as PATH: nothing of this test run leaks in."""
    env = {k: v for k, v in os.environ.items() if not _LEFT_OUT.fullmatch(k)}
    return {**env, "PATH": path, **extra}


def jdk_tools() -> set[str]:
    """The names in the JDK's bin/ (javac's, links resolved), java itself aside."""
    javac = shutil.which("javac")
    assert javac, "javac is not on PATH: a wheel with the JVM reader is built with a JDK"
    return {name for name in os.listdir(Path(javac).resolve().parent)} - {"java"}


def path_without_jdk(where: Path) -> str:
    """One directory of links to every command on this PATH except the JDK's tools (javac, jar, ...)."""
    where.mkdir(parents=True)
    left_out = jdk_tools()
    for directory in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(directory) or os.path.exists(os.path.join(directory, os.pardir, "pyvenv.cfg")):
            continue        # a virtual environment's bin/ (this test run's) is no part of the host
        for name in sorted(os.listdir(directory)):
            target = os.path.join(directory, name)
            if name in left_out or (where / name).exists() or not (os.path.isfile(target) and os.access(target, os.X_OK)):
                continue
            (where / name).symlink_to(target)
    assert shutil.which("javac", path=str(where)) is None
    return str(where)


def java_runtime_home(where: Path) -> Path:
    """A JAVA_HOME holding bin/java alone (a link to this host's java): a runtime, no compiler."""
    java = shutil.which("java")
    assert java, "java is not on PATH"
    (where / "bin").mkdir(parents=True)
    (where / "bin" / "java").symlink_to(Path(java).resolve())
    return where
