"""The deletion passes' names of a filesystem group's logs (`DeletionPasses._names_of`), kept while
the group stands, attacked by threads: the interval, hung-retry, pressure and resumed passes run on
the scheduler's pool, several at once (the hung retry without the group's lock), and after a reload
every one of them finds the kept names stale at once. None may fail for another's update of them
(on f196323: "dictionary changed size during iteration", the pass not run). A real scheduler over
real logs; the groups replaced as a reload replaces them; the interpreter's thread switch made as
short as it goes, so that a switch falls inside one pass's update of the names."""

from __future__ import annotations

import dataclasses
import sys
import threading
import time

from policies import parse_config
from retention import RetentionScheduler

from retention_helpers import make_log


def test_passes_looking_up_their_logs_at_once_after_reloads_never_fail(tmp_path):
    """60 logs, a policy each (as 10,000 logs one policy each: `Filesystem.policies`), on one disk:
    60 names kept; a reload every 2 ms; threads looking up the logs of one policy after another."""
    names = [f"l{i:02d}" for i in range(60)]
    for name in names:
        make_log(tmp_path / name, 1)
    logs = "".join(f"  {n}:\n    path: {tmp_path / n}\n    policy: p{n}\n" for n in names)
    policies = "".join(f"  p{n}:\n    reserve: 1h\n" for n in names)
    scheduler = RetentionScheduler(parse_config(f"service:\n  audit: {tmp_path}/audit.jsonl\nlogs:\n{logs}"
                                                f"policies:\n{policies}"))
    state, passes = scheduler._state, scheduler.passes
    (dev, fs), = state.filesystems.items()
    stop, failures = time.monotonic() + 4.0, []

    def reloads() -> None:                     # each a new group object, as `regroup` builds them
        while time.monotonic() < stop and not failures:
            state.filesystems = {dev: dataclasses.replace(fs)}
            time.sleep(0.002)

    def looks(first: int) -> None:
        i = first
        while time.monotonic() < stop and not failures:
            name = names[i % len(names)]
            try:
                assert passes._names_of(state.filesystems[dev], dev, f"p{name}") == [name]
            except Exception as exc:  # noqa: BLE001 (the test reports it)
                failures.append(exc)
            i += 7

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=reloads)] + [threading.Thread(target=looks, args=(i,)) for i in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(switch)
        scheduler.stop()
    assert not failures, f"a pass failed looking up its logs: {failures[0]!r}"
