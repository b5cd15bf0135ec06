"""Fetching ahead of a scan of archived objects: the ranges it needs next are fetched by a small
pool of threads shared by the process while it consumes those before, within a bound, and
cancelled when it stops.

A `ReadAhead` belongs to one scan. `in_order(fetch, sizes)` yields `fetch(0)`, `fetch(1)`, ... in
order, with at most `depth` of them fetched or being fetched and not yet taken; `start(job)` runs
a job of the scan (the check of an object it reaches next) on the pool of jobs; `submit(fetch)`
fetches one range. `held` counts the bytes of the ranges asked for and not yet taken (a range
`in_order` yields is taken when the next is asked for; a range dropped, once it lands), `peak` its
highest. `close()` ends it all: what has not started is cancelled, what runs is waited for (a job
stops at its next range, raising `Closed`), so nothing of the scan runs once it returns.
Thread-safe.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor, wait

__all__ = ["DEPTH", "JOBS_AHEAD", "RANGES_HELD", "Closed", "ReadAhead", "outcome"]

DEPTH = 2                             # ranges of one object fetched at once: the one hashed next, one more
JOBS_AHEAD = 2                        # objects checked ahead of the one a scan decodes
RANGES_HELD = (JOBS_AHEAD + 1) * DEPTH + 1   # the bound: those checks, the scan's own, one range ahead
_FETCHERS = ThreadPoolExecutor(RANGES_HELD, thread_name_prefix="archive-fetch")
_JOBS = ThreadPoolExecutor(JOBS_AHEAD, thread_name_prefix="archive-check-ahead")


class Closed(Exception):
    """The scan that started a job stopped: the job ended early, checking nothing."""


class ReadAhead:
    """The fetches and jobs of one scan (see the module docstring)."""

    def __init__(self, depth: int = DEPTH) -> None:
        self.depth = depth
        self._lock = threading.Lock()
        self._running: set[Future] = set()
        self._closed = False
        self.held = 0
        self.peak = 0

    def _hold(self, n: int) -> None:
        with self._lock:
            self.held += n
            self.peak = max(self.peak, self.held)

    def _run(self, pool: ThreadPoolExecutor, fn: Callable, *args) -> Future:
        with self._lock:
            if self._closed:
                raise Closed()
            future = pool.submit(fn, *args)
            self._running.add(future)
        future.add_done_callback(self._ended)
        return future

    def _ended(self, future: Future) -> None:
        with self._lock:
            self._running.discard(future)

    def start(self, job: Callable[[], object]) -> Future:
        """`job()` on the pool of jobs; Closed once the scan stopped."""
        return self._run(_JOBS, job)

    def submit(self, fetch: Callable[[], bytes], size: int) -> Future:
        """`fetch()` (about `size` bytes) on the pool of fetchers, held until `taken(size)`."""
        self._hold(size)
        try:
            return self._run(_FETCHERS, fetch)
        except Closed:
            self._hold(-size)
            raise

    def taken(self, size: int) -> None:
        self._hold(-size)

    def dropped(self, future: Future, size: int) -> None:
        """A fetch not to be taken: cancelled, or let go of once it lands."""
        if future.cancel():
            self._hold(-size)
        else:
            future.add_done_callback(lambda _: self._hold(-size))

    def in_order(self, fetch: Callable[[int], bytes], sizes: list[int]) -> Iterator[bytes]:
        """`fetch(n)` for each n of `sizes` (its bytes), in order, `depth` of them ahead."""
        pending: deque[tuple[Future, int]] = deque()
        following = 0
        try:
            for n in range(len(sizes)):
                while following < len(sizes) and following - n < self.depth:
                    pending.append((self.submit(lambda at=following: fetch(at), sizes[following]),
                                    sizes[following]))
                    following += 1
                future, size = pending.popleft()
                try:
                    yield future.result()        # held while the consumer hashes it, until it asks again
                finally:
                    self.taken(size)
        finally:
            for future, size in pending:
                self.dropped(future, size)

    def close(self) -> None:
        """Cancel what has not started, wait for what runs; nothing starts afterwards."""
        with self._lock:
            self._closed = True
            running = list(self._running)
        for future in running:
            future.cancel()
        wait(running)


def outcome(future: Future):
    """The result of a job or fetch another scan started; None when that scan stopped first."""
    try:
        return future.result()
    except (Closed, CancelledError):
        return None
