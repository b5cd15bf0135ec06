"""A real cleaning process for the audit crash and race tests.

    python audit_child.py CONFIG [--kill POINT:N] [--wait-file PATH] [--passes K] [--hold-file PATH]

Runs K manual forced passes (default 1) with a real `Cleaner`. `--kill POINT:N` SIGKILLs this
process at the N-th time (1-based) the removal reaches POINT; the wrappers call the real functions,
so everything before the point really happened:

  after-intent     the intent is fsynced, `remove_head` not called
  before-rename    inside `remove_head`: the start offset advanced, the segment not yet renamed
  after-rename     the segment renamed to `.deleted`, not unlinked
  after-unlink     the `.log.deleted` unlinked, the index not yet renamed
  before-outcome   `remove_head` returned, no outcome line
  after-outcome    the outcome line written

`--wait-file PATH`: after planning, wait until PATH exists before deleting (a stale plan, for the
race test). `--hold-file PATH`: after the passes, keep the cleaner (and the logs it owns) open
until PATH exists. Prints "ready" once imported, then one JSON line per pass: deleted, failed, elsewhere.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time


def main() -> None:
    args = sys.argv[1:]
    config_path = args[0]
    kill = wait_file = hold_file = None
    passes = 1
    i = 1
    while i < len(args):
        if args[i] == "--kill":
            point, n = args[i + 1].split(":")
            kill = (point, int(n))
        elif args[i] == "--wait-file":
            wait_file = args[i + 1]
        elif args[i] == "--hold-file":
            hold_file = args[i + 1]
        elif args[i] == "--passes":
            passes = int(args[i + 1])
        i += 2

    from policies import load_config
    from retention import Cleaner, audit
    from retention.deletion import cleaner

    counts: dict[str, int] = {}

    def reach(point: str) -> None:
        if kill is None or kill[0] != point:
            return
        counts[point] = counts.get(point, 0) + 1
        if counts[point] == kill[1]:
            os.kill(os.getpid(), signal.SIGKILL)

    if kill is not None:
        real_rename, real_unlink = os.rename, os.unlink
        real_intent, real_outcome = audit.AuditTrail.intent, audit.AuditTrail.outcome

        def rename(src, dst, *a, **kw):
            if str(src).endswith(".log"):
                reach("before-rename")
            real_rename(src, dst, *a, **kw)
            if str(src).endswith(".log"):
                reach("after-rename")

        def unlink(path, *a, **kw):
            real_unlink(path, *a, **kw)
            if str(path).endswith(".log.deleted"):
                reach("after-unlink")

        def intent(self, *a, **kw):
            ident = real_intent(self, *a, **kw)
            reach("after-intent")
            return ident

        def outcome(self, ident, event, *a, **kw):
            if event == "deleted":
                reach("before-outcome")
            real_outcome(self, ident, event, *a, **kw)
            if event == "deleted":
                reach("after-outcome")

        os.rename, os.unlink = rename, unlink
        audit.AuditTrail.intent, audit.AuditTrail.outcome = intent, outcome

    if wait_file is not None:
        real_execute = cleaner.Cleaner._execute

        def execute(self, *a, **kw):
            while not os.path.exists(wait_file):
                time.sleep(0.01)
            return real_execute(self, *a, **kw)

        cleaner.Cleaner._execute = execute

    c = Cleaner(load_config(config_path))
    print("ready", flush=True)
    for _ in range(passes):
        c.trigger_manual(force=True)
        result = c.run_pass()
        print(json.dumps({"deleted": result.deleted, "failed": result.failed, "errors": [r.error for r in result.logs if r.error] + [e for r in result.logs for e in r.errors.values()],
                          "elsewhere": sum(len(r.removed_by_another) for r in result.logs)}), flush=True)
    while hold_file is not None and not os.path.exists(hold_file):
        time.sleep(0.01)
    c.close()


if __name__ == "__main__":
    main()
