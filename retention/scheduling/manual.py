"""Manual passes: an operator's `clean()` over every log, one at a time, and the manual triggers
still open across the scheduler's per-filesystem cleaners (carried over a reload).

Thread-safe: `ManualPasses.run` refuses a second caller at once (never a queue) with
`PassRunningError` naming the pass that runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from loguru import logger

from policies import ManualTrigger, RetentionConfig

from ..deletion.results import PassResult
from .filesystems import Filesystem
from .health import merge_results

__all__ = ["ManualPasses", "PassRunningError", "open_triggers"]


class PassRunningError(RuntimeError):
    """`clean()` or `compact()` while a pass of its kind already runs: the message names it.
    Passes are not queued. The scheduler's own error, not a store error (no CommitLogError)."""


def open_triggers(filesystems: Iterable[Filesystem], config: RetentionConfig) -> dict[str, ManualTrigger]:
    """Manual triggers still open in the cleaners, for the policies `config` keeps (the most
    passes left when two filesystems disagree)."""
    merged: dict[str, ManualTrigger] = {}
    for fs in filesystems:
        for policy, trigger in dict(fs.cleaner.manual).items():
            if policy in config.policies and trigger.active:
                if policy not in merged or trigger.remaining > merged[policy].remaining:
                    merged[policy] = trigger
    return merged


class ManualPasses:
    """At most one manual pass at a time, over every filesystem."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: tuple[float, bool] | None = None   # (monotonic start, force)

    def run(self, filesystems: list[Filesystem], run_pass: Callable[[int], PassResult | None], *,
            force: bool, clock: Callable[[], float]) -> PassResult:
        """Open a manual trigger on every filesystem and run its first pass now; one result."""
        if not self._lock.acquire(blocking=False):
            raise PassRunningError(self._describe(filesystems))
        try:
            self._running = (time.monotonic(), force)
            for fs in filesystems:
                fs.cleaner.trigger_manual(force=force)
            logger.info("manual trigger{}: a pass runs now", " (force)" if force else "")
            results = [r for r in (run_pass(fs.dev) for fs in filesystems) if r is not None]
            return merge_results(results, executed=True, clock=clock)
        finally:
            self._running = None
            self._lock.release()

    def _describe(self, filesystems: list[Filesystem]) -> str:
        running = self._running
        if running is None:   # it ended between the refusal and this line
            return "a manual pass was running; try again"
        started, force = running
        mounts = ", ".join(sorted(fs.mountpoint for fs in filesystems))
        return (f"a manual{' (force)' if force else ''} pass over every log is running on {mounts} "
                f"(for {time.monotonic() - started:.1f}s); try again when it ends")
