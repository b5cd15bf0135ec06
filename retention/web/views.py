"""Costly read-only views (the status with its /proc scan results, the plan, the metrics text)
computed at most once per short period and shared by every caller.

`SharedView(compute, ttl)` keeps the last result for `ttl` seconds. A caller that finds it stale
computes it again; callers arriving while that computation runs wait for it and share its result,
so 32 clients asking at once cost one computation, not 32. A computation that raises is shared the
same way (its callers all get the error) and is not kept: the next caller after it tries again.
`invalidate()` makes the next caller compute afresh (after a manual pass, a reload); a computation
that was already running when it was called is handed to its waiters but not kept.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["SharedView"]

T = TypeVar("T")


class SharedView(Generic[T]):
    """One value computed by `compute()` at most once per `ttl` seconds. Thread-safe."""

    def __init__(self, compute: Callable[[], T], ttl: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if ttl < 0:
            raise ValueError(f"ttl must not be negative, got {ttl}")
        self._compute = compute
        self._ttl = ttl
        self._clock = clock
        self._cond = threading.Condition()
        self._value: T | None = None
        self._at: float | None = None        # clock time the kept value's computation started
        self._generation = 0                 # bumped by invalidate()
        self._round = 0                      # bumped when a computation ends
        self._running = False
        self._last: tuple[int, T | None, BaseException | None] | None = None
        self.computations = 0                # how many times compute() ran (for tests and benchmarks)

    def get(self) -> T:
        """The value, computed now only when the kept one is older than `ttl` seconds."""
        with self._cond:
            while True:
                if self._at is not None and self._clock() - self._at < self._ttl:
                    return self._value  # type: ignore[return-value]
                if not self._running:
                    break
                waiting_for = self._round + 1
                while self._running and self._round < waiting_for:
                    self._cond.wait()
                last = self._last
                if last is not None and last[0] == waiting_for:
                    _, value, error = last
                    if error is not None:
                        raise error
                    return value  # type: ignore[return-value]
            self._running = True
            generation = self._generation
            self.computations += 1
        started = self._clock()
        value, error = None, None
        try:
            value = self._compute()
        except BaseException as exc:  # noqa: BLE001 (handed to the waiters, then re-raised)
            error = exc
        with self._cond:
            self._running = False
            self._round += 1
            self._last = (self._round, value, error)
            if error is None and generation == self._generation:
                self._value, self._at = value, started
            self._cond.notify_all()
        if error is not None:
            raise error
        return value  # type: ignore[return-value]

    def invalidate(self) -> None:
        """Forget the kept value: the next `get()` computes afresh."""
        with self._cond:
            self._generation += 1
            self._at = None
            self._value = None
