"""Compaction passes inside the scheduler: `compact:POLICY` jobs, the pass after a pressure pass that
could not free enough, `RetentionScheduler.compact()` and `POST /compact`, at most one per filesystem.

**Locking.** Each filesystem has a compaction lock of its own, beside (not inside) the deletion
pass lock. A second compaction on a filesystem is refused at once (`PassRunningError`, 409 over
HTTP, naming the one that runs), never queued. Compaction does not take the deletion lock because
under disk pressure deletion goes first: a compaction may run for `max_pass_duration` (60 s by
default) plus its last output, and holding the deletion lock that long would keep a pressure pass
from freeing space. Running side by side is safe because the store serialises them where it matters:
a swap takes the log's removal lock and checks its inputs are still the same files, so a head removal
that wins makes that output fail cleanly (`inputs-changed`, nothing swapped) and the next pass plans
again. Under pressure the order is explicit: the pressure job runs its deletion pass first and asks
for a compaction only when that pass deleted nothing (`policies.should_compact_under_pressure`
decides per log from a fresh disk reading: compaction is what frees space when everything left is
protected and mostly dead). A dry run changes nothing, so it takes no lock.

Thread-safe: every method may be called from any thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone

from loguru import logger

from commitlog import disk_usage
from policies import plural, pressure_calls_for_compaction, should_compact_under_pressure

from ..compaction.summary import CompactionResult, LogCompaction
from ..compaction.compactor import Compactor, Pending
from ..compaction.look_memory import CompactionMemory
from ..deletion.changes import ChangeMarks
from .manual import PassRunningError
from .metrics import PassKind
from .scheduler_state import SchedulerState

__all__ = ["CompactionPasses"]

SETTLE_WAIT = 60.0    # seconds a pass waits for the start-up settling of killed compactions


class CompactionPasses:
    """The scheduler's compactions: one lock per filesystem, what runs now and the last result.

    state: the scheduler's shared state (its configuration, filesystems and audit trail change
    on reload; its stop flag and clock guard: compactions judge tombstone retention and group
    staleness at its trusted now after a forward clock step, their audit times too).
    pending: the pending-ranges hook handed to every `Compactor` (see `retention.compaction.compactor`).
    marks: the roll watch's dirty marks now, or None (`retention.deletion.changes`): a log no event
    marked dirty is not keyed again (`retention.compaction.look_memory`).
    """

    def __init__(self, state: SchedulerState, *, metrics, pending: Pending | None = None,
                 marks: Callable[[], ChangeMarks | None] = lambda: None) -> None:
        self._state, self._marks = state, marks
        self._metrics, self._clock, self._stopping, self._pending = metrics, state.guard.judged, state.stopping, pending
        self._guard = threading.Lock()
        self._locks: dict[int, threading.Lock] = {}
        self._running: dict[int, tuple[str, str, float, Compactor]] = {}  # dev -> (kind, mount, start, compactor)
        self._memory: dict[int, CompactionMemory] = {}   # dev -> its logs' last empty looks (change-driven)
        # The last pass that did or tried something, and per log its part of the last pass over
        # it: kept as the results, described when `/status` asks (a job over 10,000 logs that
        # found nothing to do built 10,000 descriptions nobody read).
        self._last: tuple[str, str, CompactionResult] | None = None
        self._last_by_log: dict[str, tuple[str, CompactionResult, LogCompaction]] = {}
        self._settled = threading.Event()        # cleared while `start_settle`'s thread runs
        self._settled.set()

    def _lock(self, dev: int) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(dev, threading.Lock())

    def _memory_of(self, dev: int) -> CompactionMemory | None:
        """The memory of `dev`'s last empty looks; None while the clock guard holds a forward
        step (what the step alone would expire is judged at the trusted time: nothing is kept)."""
        if self._state.guard.trusted_now() is not None:
            return None
        with self._guard:
            memory = self._memory.setdefault(dev, CompactionMemory())
        memory.keep_only(self._state.config.logs)
        memory.changes = self._marks()
        return memory

    def _describe(self, dev: int) -> str:
        running = self._running.get(dev)
        if running is None:   # it ended between the refusal and this line
            return "a compaction was running on this filesystem; try again"
        kind, mount, started, compactor = running
        now = compactor.progress() or {}
        doing = f" (log {now['log']}, output {now['outputs_done'] + 1} of {now['outputs_planned']})" if now else ""
        return (f"a {kind} compaction is running on {mount}{doing} for {time.monotonic() - started:.1f}s; "
                f"try again when it ends")

    # ------------------------------------------------------------------ running
    def run(self, dev: int, *, kind: str, policy: str | None = None, dry_run: bool = False,
            only_if=None) -> CompactionResult | None:
        """One pass over the logs of filesystem `dev` (those of `policy`, or all); None when the
        filesystem is gone or has no such log. PassRunningError when one runs there already."""
        fs = self._state.filesystems.get(dev)
        if fs is None or self._stopping.is_set():
            return None
        names = [n for n in fs.logs if policy is None or fs.config.logs[n].policy == policy]
        if not names:
            return None
        lock = self._lock(dev)
        self._settled.wait(SETTLE_WAIT)
        if not dry_run and not lock.acquire(blocking=False):
            raise PassRunningError(self._describe(dev))
        compactor = Compactor(self._state.config, audit=self._state.audit, metrics=self._metrics, clock=self._clock,
                              pending=self._pending, stop=self._stopping.is_set,
                              memory=None if dry_run else self._memory_of(dev))
        try:
            if not dry_run:
                self._running[dev] = (kind, fs.mountpoint, time.monotonic(), compactor)
            result = compactor.run(names=names, dry_run=dry_run, only_if=only_if)
        finally:
            compactor.close()
            if not dry_run:
                self._running.pop(dev, None)
                lock.release()
        if not dry_run and (result.outputs or kind != PassKind.PRESSURE):
            self._last = (kind, fs.mountpoint, result)
        if not dry_run:
            self._last_by_log.update((log.name, (kind, result, log)) for log in result.logs)
        return result

    @property
    def last(self) -> dict | None:
        """`/status`'s `compaction.last`: the last pass that did or tried something, described."""
        last = self._last
        if last is None:
            return None
        kind, mountpoint, result = last
        return {"kind": kind, "mountpoint": mountpoint, "outputs": result.outputs,
                "reclaimed_bytes": result.reclaimed_bytes, **result.to_json_dict()}

    def last_by_log(self) -> dict[str, dict]:
        """Per log, its part of the last pass that ran over it."""
        return {name: {"at": result.at.isoformat(), "kind": kind, "outputs": len(log.outputs),
                       "reclaimed_bytes": log.reclaimed_bytes, "error": log.error}
                for name, (kind, result, log) in self._last_by_log.copy().items()}

    def run_all(self, *, dry_run: bool = False) -> CompactionResult:
        """`RetentionScheduler.compact()`: one pass over every log, filesystem by filesystem; refused
        (PassRunningError) before anything starts when a compaction runs on any of them."""
        devs = list(self._state.filesystems)
        self._settled.wait(SETTLE_WAIT)
        if not dry_run:
            for dev in devs:
                lock = self._lock(dev)
                if not lock.acquire(blocking=False):
                    raise PassRunningError(self._describe(dev))
                lock.release()   # a job starting right now still wins the race: then run() refuses
        results = [r for r in (self.run(dev, kind=PassKind.MANUAL, dry_run=dry_run) for dev in devs) if r is not None]
        at = datetime.fromtimestamp(self._clock(), timezone.utc)
        return CompactionResult(min((r.at for r in results), default=at), [log for r in results for log in r.logs],
                                dry_run=dry_run, duration=sum(r.duration for r in results),
                                interrupted=any(r.interrupted for r in results))

    def start_settle(self) -> None:
        """`settle` in a thread of its own; a pass asked for meanwhile waits for it (up to
        `SETTLE_WAIT` seconds), rather than being refused as if a compaction ran."""
        self._settled.clear()

        def run() -> None:
            try:
                self.settle()
            finally:
                self._settled.set()
        threading.Thread(target=run, name="retention-compact-settle", daemon=True).start()

    def settle(self) -> None:
        """At start: settle the compaction intents of processes that died (and finish their swaps)
        now, not at the first compaction pass, `compaction.interval` later; left to the pass when
        a compaction already runs on a filesystem. Never raises."""
        locks = [self._lock(dev) for dev in list(self._state.filesystems)]
        taken = [lock for lock in locks if lock.acquire(blocking=False)]
        try:
            if len(taken) == len(locks) and not self._stopping.is_set():
                compactor = Compactor(self._state.config, audit=self._state.audit, metrics=self._metrics,
                                      clock=self._clock, stop=self._stopping.is_set)
                try:
                    compactor.settle()
                finally:
                    compactor.close()
        except Exception as exc:  # noqa: BLE001 (the next compaction pass settles them)
            logger.opt(exception=exc).error("settling interrupted compactions at start raised: {}", exc)
        finally:
            for lock in taken:
                lock.release()

    def job(self, policy: str) -> None:
        """The `compact:POLICY` job: a pass over the logs of `policy` on each filesystem."""
        fss = self._state.filesystems
        for dev, fs in list(fss.items()):
            if any(fs.config.logs[n].policy == policy for n in fs.logs):
                self._guarded(dev, kind=PassKind.INTERVAL, policy=policy)

    def after_pressure(self, dev: int) -> None:
        """After a pressure pass that deleted nothing: compact the logs of `dev` for which
        `should_compact_under_pressure` holds at a fresh reading of the disk."""
        fs = self._state.filesystems.get(dev)
        if fs is None:
            return
        try:
            used = disk_usage(fs.probe()).used_ratio
            if not any(pressure_calls_for_compaction(config=policy.compaction, disk=policy.disk,
                                                     used_ratio=used, deletion_can_free=False)
                       for policy in fs.policies()):
                return   # the interval jobs are enough: no log need be listed
        except OSError as exc:
            logger.warning("compaction after pressure on {}: {}", fs.mountpoint, exc)
            return
        at = datetime.fromtimestamp(self._clock(), timezone.utc)

        def needed(segments, policy) -> bool:
            return should_compact_under_pressure(segments, config=policy.compaction, disk=policy.disk,
                                                 used_ratio=used, deletion_can_free=False, now=at)
        self._guarded(dev, kind=PassKind.PRESSURE, only_if=needed)

    def _guarded(self, dev: int, **kwargs) -> None:
        try:
            result = self.run(dev, **kwargs)
        except PassRunningError as exc:
            logger.debug("{} compaction skipped: {}", kwargs.get("kind"), exc)
            return
        except Exception as exc:  # noqa: BLE001 (a pass that raises never stops the service)
            logger.opt(exception=exc).error("{} compaction raised: {}", kwargs.get("kind"), exc)
            return
        if result is not None and result.outputs:
            logger.info("{} compaction on {}: {}, {} bytes reclaimed in {:.3f}s", kwargs.get("kind"),
                        self._state.filesystems[dev].mountpoint if dev in self._state.filesystems else dev,
                        plural(result.outputs, "output"), result.reclaimed_bytes, result.duration)

    def wait(self, timeout: float) -> None:
        """Wait up to `timeout` seconds for running compactions to end (they stop between outputs)."""
        deadline = time.monotonic() + timeout
        for lock in list(self._locks.values()):
            if lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
                lock.release()

    # ------------------------------------------------------------------ status
    def status(self) -> dict:
        """`/status`'s `compaction`: what runs now (log, outputs done/planned, bytes moved) and the
        last pass that did or tried something."""
        running = []
        for dev, (kind, mount, started, compactor) in list(self._running.items()):
            running.append({"mountpoint": mount, "kind": kind, "seconds": round(time.monotonic() - started, 3),
                            **(compactor.progress() or {})})
        return {"running": running, "last": self.last, "logs": self.last_by_log()}
