"""The scheduler's deletion passes: one pass over the logs of a filesystem under its lock (by
interval, for hung segments, under pressure, on demand), recorded in the pass ledger, and a pass a
reload cut short resumed at once on the new configuration. Thread-safe: passes on one filesystem
are serialised by its lock (`SchedulerState.fs_lock`); different filesystems run in parallel.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from apscheduler.schedulers.background import BackgroundScheduler
from loguru import logger

from commitlog.layout import HUNG_FILE
from policies import DISK_FORCE

from ..deletion.results import PassResult
from .health import PassLedger
from .jobs import add_once
from .metrics import PassKind
from .scheduler_state import SchedulerState

__all__ = ["DeletionPasses"]


class DeletionPasses:
    """Runs deletion passes for the scheduler. `on_pass(kind, result)` is called after each one,
    from the thread that ran it; `jobs` is the APScheduler a resumed pass is queued on;
    `rediscover()` is called before each interval pass; `forced(dev)` after a pass not started
    forcing that found its filesystem above force_ratio at its own reading."""

    def __init__(self, state: SchedulerState, ledger: PassLedger, jobs: BackgroundScheduler, *,
                 on_pass: Callable[[str, PassResult], object] | None = None,
                 rediscover: Callable[[], object] = lambda: None,
                 forced: Callable[[int], object] = lambda dev: None) -> None:
        self._state = state
        self._forced = forced
        self._rediscover = rediscover
        self._ledger = ledger
        self._jobs = jobs
        self._on_pass = on_pass
        # (dev, policy) -> (fs, names): replaced whole, never changed once installed (`_names_of`)
        self._names: dict[tuple[int, str | None], tuple[object, list[str]]] = {}

    # ------------------------------------------------------------------ the jobs
    def interval(self, policy: str) -> None:
        self._rediscover()      # `discover` roots: a log directory come or gone is applied first
        for dev in self._state.filesystems_of(policy):
            self.run(dev, kind=PassKind.INTERVAL, policy=policy)

    def hung_retry(self, policy: str) -> None:
        state = self._state
        for dev in state.filesystems_of(policy):
            fs = state.filesystems.get(dev)
            if fs is None:
                continue
            # A kept plan's log held no hung segment when planned, and a hung file made since (by
            # another process) marks it changed: its next pass plans it and keeps no plan then.
            kept = fs.cleaner.memory.kept_names()
            hung = {n for n in self._names_of(fs, dev, policy) if n not in kept
                    and os.path.exists(os.path.join(str(fs.config.logs[n].path), HUNG_FILE))}
            if hung:
                self.run(dev, kind=PassKind.HUNG_RETRY, policy=policy, only=hung)

    def pressure(self, dev: int) -> PassResult | None:
        return self.run(dev, kind=PassKind.PRESSURE)

    def manual(self, dev: int) -> PassResult | None:
        return self.run(dev, kind=PassKind.MANUAL)

    # ------------------------------------------------------------------ one pass
    def run(self, dev: int, *, kind: str, policy: str | None = None,
            only: set[str] | None = None) -> PassResult | None:
        """One pass over the logs of filesystem `dev` (those of `policy`, or all), under its lock.
        While the disk forces, the pass forces down to force_target (`policies.pressure`)."""
        state = self._state
        with state.fs_lock(dev):
            if state.stopping.is_set():
                return None
            fs = state.filesystems.get(dev)
            if fs is None:
                return None
            names = [n for n in self._names_of(fs, dev, policy) if only is None or n in only]
            if not names:
                return None
            started = time.monotonic()
            forcing = fs.forcing
            try:
                result = fs.cleaner.run_pass(names=names, forcing=forcing, dev=dev)
            except Exception as exc:  # noqa: BLE001 (a pass that raises never stops the service)
                logger.opt(exception=exc).error("{} pass over {} raised: {}", kind, ", ".join(names), exc)
                self._ledger.error(names, kind, exc, time.monotonic() - started, state.clock())
                return None
            try:
                self._ledger.record(fs.cleaner.logs, fs.config, result, kind, state.clock())
                logger.opt(lazy=True).debug("{} pass over {}: deleted {} ({} bytes) in {:.3f}s", lambda: kind,
                                            lambda: ", ".join(names), lambda: result.deleted,
                                            lambda: result.freed_bytes, lambda: result.duration)
            except Exception as exc:  # noqa: BLE001
                logger.opt(exception=exc).error("recording the {} pass failed: {}", kind, exc)
        if result.interrupted and not state.stopping.is_set():
            self._resume(names, kind)
        if not forcing and _forced(result, names) and not state.stopping.is_set():
            # Not started forcing, yet it forced: its own reading was above force_ratio before any
            # disk check saw it (the start-up pass, a crossing just before a pass). Left below
            # force_ratio by files_per_pass, the disk would stay above force_target for good.
            self._forced(dev)
        if self._on_pass is not None:
            try:
                self._on_pass(kind, result)
            except Exception as exc:  # noqa: BLE001
                logger.opt(exception=exc).warning("on_pass callback raised: {}", exc)
        return result

    def _names_of(self, fs, dev: int, policy: str | None) -> list[str]:
        """The logs of filesystem group `fs` under `policy` (all: None), as long as the group stands.
        Passes ask from several threads at once (the hung retry without the group's lock): the
        mapping is never changed once installed, a new one replaces it (one taken by another
        thread meanwhile is lost, and worked out again)."""
        known = self._names.get((dev, policy))
        if known is None or known[0] is not fs:      # a group rebuilt since (a reload): none kept alive
            current = self._state.filesystems
            names = {key: kept for key, kept in list(self._names.items()) if current.get(key[0]) is kept[0]}
            known = names[(dev, policy)] = (fs, [n for n in fs.logs
                                                 if policy is None or fs.config.logs[n].policy == policy])
            self._names = names
        return known[1]

    def _resume(self, names: list[str], kind: str) -> None:
        """A pass cut short by a reload: its logs get a pass now, on the configuration that
        replaced it, instead of waiting an interval (an hour, in a real configuration)."""
        by_dev: dict[int, set[str]] = {}
        for name in names:
            dev = self._state.log_devs.get(name)
            if dev is not None:                  # a log the new configuration dropped is left
                by_dev.setdefault(dev, set()).add(name)
        for dev, only in by_dev.items():
            logger.info("{} pass over {} was interrupted by a reload: resuming it now", kind,
                        ", ".join(sorted(only)))
            add_once(self._jobs, self._resumed, (dev, frozenset(only)), f"resume:{dev}:{min(only)}")

    def _resumed(self, dev: int, only: frozenset[str]) -> None:
        self.run(dev, kind=PassKind.RESUMED, only=set(only))


def _forced(result: PassResult, names: list[str]) -> bool:
    """Whether the pass planned one of `names` (its filesystem's logs, not a budget partner
    elsewhere) under `disk-force`: for a pass not started forcing, a reading above force_ratio."""
    wanted = set(names)
    return any(r.plan is not None and DISK_FORCE in r.plan.triggers for r in result.logs if r.name in wanted)
