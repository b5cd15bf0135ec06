"""The Makefile's front door: a plain `make` lists the targets, and `make test` checks the host
(scripts/check_prereqs) before installing anything, naming everything missing in one line."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Every command scripts/check_prereqs looks for, and what it and make run to do so.
TOOLS = ("javac", "java", "chromium", "chromedriver", "promtool", "unshare", "nsenter", "setpriv", "prlimit", "mount",
         "mkfs.ext4", "id", "sh", "make")


def path_without(tmp_path: Path, *left_out: str) -> str:
    """A PATH of one directory holding links to this host's TOOLS, less `left_out`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        if tool not in left_out and found:
            (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def test_a_plain_make_prints_the_targets():
    done = subprocess.run(["make", "--no-print-directory"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    for target in ("run", "test", "prereqs", "docs", "docs-serve", "bench", "clean"):
        assert f"make {target} " in done.stdout, target


def test_make_test_names_a_missing_jdk_in_one_line_before_installing_anything(tmp_path):
    work = tmp_path / "clone"
    (work / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "Makefile", work / "Makefile")
    shutil.copy(ROOT / "scripts" / "check_prereqs", work / "scripts" / "check_prereqs")
    env = {**{k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")},
           "PATH": path_without(tmp_path, "javac"), "PYTHON": sys.executable}   # as if typed, not under make
    done = subprocess.run(["make", "--no-print-directory", "test"], cwd=work, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if not re.match(r"make(\[\d+\])?: ", line)]
    assert len(lines) == 1 and "javac" in lines[0] and "openjdk-17-jdk-headless" in lines[0], done.stderr
    assert "chromium" not in lines[0]                 # only what is missing
    assert not (work / ".venv").exists()              # nothing installed


def test_check_prereqs_names_everything_missing_at_once(tmp_path):
    env = {**os.environ, "PATH": path_without(tmp_path, "javac", "java", "promtool", "nsenter"),
           "PYTHON": sys.executable}
    done = subprocess.run(["sh", str(ROOT / "scripts" / "check_prereqs")], env=env, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 1
    assert len(done.stderr.splitlines()) == 1 and done.stdout == ""
    for name in ("javac", "java", "promtool (prometheus)", "nsenter (util-linux)"):
        assert name in done.stderr, name
    assert "setpriv" not in done.stderr


def test_check_prereqs_is_silent_on_a_host_with_everything():
    if os.geteuid() != 0 or any(shutil.which(tool) is None for tool in TOOLS):
        missing = [tool for tool in TOOLS if shutil.which(tool) is None]
        done = subprocess.run(["sh", str(ROOT / "scripts" / "check_prereqs")], capture_output=True, text=True)
        assert done.returncode == 1 and all(tool in done.stderr for tool in missing)
        return
    done = subprocess.run(["sh", str(ROOT / "scripts" / "check_prereqs")],
                          env={**os.environ, "PYTHON": sys.executable}, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and done.stdout == done.stderr == "", done.stderr
