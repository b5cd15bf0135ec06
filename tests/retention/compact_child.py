"""A real compacting process for the compaction crash tests.

    python compact_child.py CONFIG POINT

Runs one compaction pass with a real `Compactor` and SIGKILLs itself the first time the pass
reaches POINT; the wrappers call the real functions, so everything before the point happened:

  after-intent    the intent of the first output is fsynced, the store not called
  after-commit    inside the store's swap: the output renamed over its first input (the commit
                  point), the other inputs not yet removed
  before-outcome  the store's compact returned, no outcome line yet
  none            no kill: the pass runs to its end
  calls:N         SIGKILL just before the pass's Nth file-system call (`count_calls`); calls:0
                  kills nothing and prints the calls it counted

Prints "ready" once imported, then a JSON line with the outputs done and, for calls:N, the calls
counted (if it lives).
"""

from __future__ import annotations

import builtins
import json
import os
import signal
import sys

# Flags and modes of an open that can change a file: creating, truncating or writing one.
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_WRITE_MODES = set("wax+")
# The os functions that change files or directories; the store and the audit trail use only these.
_CHANGING = ("write", "fsync", "fdatasync", "utime", "rename", "replace", "unlink", "ftruncate",
             "truncate", "mkdir", "rmdir", "link", "symlink", "posix_fallocate")


def _what(arg) -> str:
    if isinstance(arg, int):
        try:
            return os.path.basename(os.readlink(f"/proc/self/fd/{arg}"))
        except OSError:
            return f"fd {arg}"
    return os.path.basename(os.fspath(arg)) if isinstance(arg, (str, bytes, os.PathLike)) else repr(arg)


def count_calls(kill_at: int) -> list[str]:
    """From now on, count every call that can change a file (an open for writing or creating, a
    write, fsync, rename, unlink, ...) in the returned list ("name target"), and SIGKILL this
    process just before the `kill_at`th (never when 0): every call before it happened, it did not."""
    calls: list[str] = []

    def wrap(name, fn, counts=lambda *a, **kw: True):
        def inner(*args, **kwargs):
            if counts(*args, **kwargs):
                calls.append(f"{name} {_what(args[0]) if args else ''}")
                if len(calls) == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)
            return fn(*args, **kwargs)
        return inner

    for name in _CHANGING:
        if hasattr(os, name):
            setattr(os, name, wrap(name, getattr(os, name)))
    os.open = wrap("open", os.open, lambda path, flags, *a, **kw: bool(flags & _WRITE_FLAGS))
    builtins.open = wrap("open", builtins.open,
                         lambda file, mode="r", *a, **kw: bool(_WRITE_MODES & set(mode)))
    return calls


def main() -> None:
    config_path, point = sys.argv[1], sys.argv[2]
    from commitlog import CommitLog
    from policies import load_config
    from retention import audit
    from retention.compaction.compactor import Compactor

    def die(at: str) -> None:
        if at == point:
            os.kill(os.getpid(), signal.SIGKILL)

    real_intent, real_compact, real_rename = audit.AuditTrail.intent, CommitLog.compact, os.rename

    def intent(self, *a, **kw):
        ident = real_intent(self, *a, **kw)
        die("after-intent")
        return ident

    def compact(self, *a, **kw):
        out = real_compact(self, *a, **kw)
        die("before-outcome")
        return out

    def rename(src, dst, *a, **kw):
        real_rename(src, dst, *a, **kw)
        if str(src).endswith(".log.cleaned"):
            die("after-commit")

    audit.AuditTrail.intent, CommitLog.compact, os.rename = intent, compact, rename
    c = Compactor(load_config(config_path))
    print("ready", flush=True)
    calls = count_calls(int(point.split(":")[1])) if point.startswith("calls:") else None
    result = c.run()
    print(json.dumps({"outputs": result.outputs, "calls": calls}), flush=True)
    c.close()


if __name__ == "__main__":
    main()
