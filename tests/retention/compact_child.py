"""A real compacting process for the compaction crash tests.

    python compact_child.py CONFIG POINT

Runs one compaction pass with a real `Compactor` and SIGKILLs itself the first time the pass
reaches POINT; the wrappers call the real functions, so everything before the point happened:

  after-intent    the intent of the first output is fsynced, the store not called
  after-commit    inside the store's swap: the output renamed over its first input (the commit
                  point), the other inputs not yet removed
  before-outcome  the store's compact returned, no outcome line yet
  none            no kill: the pass runs to its end

Prints "ready" once imported, then a JSON line with the outputs done (if it lives).
"""

from __future__ import annotations

import json
import os
import signal
import sys


def main() -> None:
    config_path, point = sys.argv[1], sys.argv[2]
    from commitlog import CommitLog
    from policies import load_config
    from retention import audit
    from retention.compactor import Compactor

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
    result = c.run()
    print(json.dumps({"outputs": result.outputs}), flush=True)
    c.close()


if __name__ == "__main__":
    main()
