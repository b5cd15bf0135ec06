"""SharedView: computed at most once per ttl, shared by concurrent callers, errors shared but not
kept, invalidation honoured even for a computation already running."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from retention.web.views import SharedView


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_32_concurrent_callers_share_one_computation():
    release = threading.Event()
    entered = threading.Event()

    def compute() -> int:
        entered.set()
        release.wait(10)
        return 42

    view = SharedView(compute, ttl=60.0)
    barrier = threading.Barrier(32)

    def client() -> int:
        barrier.wait(10)
        return view.get()

    with ThreadPoolExecutor(32) as pool:
        futures = [pool.submit(client) for _ in range(32)]
        assert entered.wait(10)
        time.sleep(0.3)                  # the other 31 are inside get(), waiting for this computation
        release.set()
        assert [f.result(10) for f in futures] == [42] * 32
    assert view.computations == 1


def test_kept_for_ttl_then_computed_again():
    clock = _Clock()
    calls = []
    view = SharedView(lambda: calls.append(clock.now) or len(calls), ttl=1.0, clock=clock)
    assert view.get() == 1
    clock.now += 0.99
    assert view.get() == 1
    clock.now += 0.02
    assert view.get() == 2
    assert view.computations == 2


def test_an_error_is_handed_to_every_waiter_and_not_kept():
    release = threading.Event()
    entered = threading.Event()
    outcomes = iter([RuntimeError("disk gone"), 7])

    def compute() -> int:
        entered.set()
        release.wait(10)
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    view = SharedView(compute, ttl=60.0)
    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(view.get) for _ in range(8)]
        assert entered.wait(10)
        release.set()
        for f in futures:
            with pytest.raises(RuntimeError, match="disk gone"):
                f.result(10)
    assert view.get() == 7                     # the failure was not kept: computed again
    assert view.computations == 2


def test_invalidate_during_a_computation_keeps_nothing_stale():
    release = threading.Event()
    entered = threading.Event()
    values = iter(["before", "after"])

    def compute() -> str:
        value = next(values)
        if value == "before":
            entered.set()
            release.wait(10)
        return value

    view = SharedView(compute, ttl=60.0)
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(view.get)
        assert entered.wait(10)
        view.invalidate()                      # e.g. a manual pass ended meanwhile
        release.set()
        assert running.result(10) == "before"  # its caller gets it ...
    assert view.get() == "after"               # ... but the next caller computes afresh


def test_a_negative_ttl_is_refused():
    with pytest.raises(ValueError, match="ttl must not be negative"):
        SharedView(lambda: 1, ttl=-1)
