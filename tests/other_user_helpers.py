"""Running the store, the CLI and the sidecar as another user (uid/gid 65534, nobody), for the
permission tests: root passes every permission check, so only another user meets EACCES.

    as_user(uid)                the setpriv prefix of a command run as `uid` (its group the same
                                number, no supplementary groups); AS_NOBODY, as nobody
    run_cli_as_nobody(...)      `python -m retention.cli ARGS` as nobody, its output captured
    call_as_nobody(fn, *args)   fn(*args) in a fresh interpreter as nobody; its repr, or AssertionError

`nobody_tmp` (tests/conftest.py) is a directory under /tmp that nobody may traverse (pytest's
tmp_path sits under a 0700 directory of root's)."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

NOBODY = 65534
NOBODY_NAME = "nobody"


def as_user(uid: int) -> list[str]:
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]


AS_NOBODY = as_user(NOBODY)


def run_cli_as_nobody(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*AS_NOBODY, sys.executable, "-m", "retention.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


# Runs in a fresh interpreter as nobody: fn(*args) from stdin (pickled, fn by reference), its repr on
# stdout; on an exception its type name and message, exit 1.
_CALL = """
import pickle, sys
fn, args = pickle.load(sys.stdin.buffer)
try:
    out = repr(fn(*args))
except BaseException as exc:
    sys.stdout.write(f"{type(exc).__name__}: {exc}")
    sys.exit(1)
sys.stdout.write(out)
"""


def call_as_nobody(fn, *args) -> str:
    """repr(fn(*args)) computed as nobody; AssertionError with the child's exception when it
    raised (its type name first, so callers can match it). `fn` is a module-level function: the
    child is a fresh interpreter, never a fork of the test process (a fork copies the locks other
    threads hold, SQLite's among them, and the child then waits on them for ever: a pytest-xdist
    worker has such threads, left by the Spark, archive and sidecar tests it ran before)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run([*AS_NOBODY, sys.executable, "-c", _CALL], input=pickle.dumps((fn, args)),
                          capture_output=True, cwd="/", env=env, timeout=120)
    out = done.stdout.decode(errors="replace")
    if done.returncode != 0:
        raise AssertionError(out or done.stderr.decode(errors="replace"))
    return out
