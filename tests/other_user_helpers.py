"""Running the store, the CLI and the sidecar as another user (uid/gid 65534, nobody), for the
permission tests: root passes every permission check, so only another user meets EACCES.

    as_user(uid)                the setpriv prefix of a command run as `uid` (its group the same
                                number, no supplementary groups); AS_NOBODY, as nobody
    run_cli_as_nobody(...)      `python -m retention.cli ARGS` as nobody, its output captured
    call_as_nobody(fn)          fn() in a forked child that became nobody; its repr, or AssertionError

`nobody_tmp` (tests/conftest.py) is a directory under /tmp that nobody may traverse (pytest's
tmp_path sits under a 0700 directory of root's)."""

from __future__ import annotations

import os
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


def call_as_nobody(fn) -> str:
    """repr(fn()) computed in a forked child running as nobody; AssertionError with the child's
    exception when it raised (its type name first, so callers can match it)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            out = repr(fn()).encode()
            code = 0
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            out = f"{type(exc).__name__}: {exc}".encode()
        os.write(w, out)
        os._exit(code)
    os.close(w)
    with os.fdopen(r) as f:
        out = f.read()
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise AssertionError(out)
    return out
