"""The compaction runner: for each log whose policy has `compaction.enabled`, plan a pass
(`policies.plan_compaction`), decide every record with the one liveness rule
(`policies.LivenessRule.cause`) and let the store rewrite and swap (`CommitLog.compact`), one output
at a time, throttled, within the pass's time budget, audited (an intent before each output, its
outcome after; an intent whose process died is settled by the next pass). Pending ranges of
unfinished Spark jobs come from the installed protectors and are always kept; a protector that
raises fails that log's pass. A dry run changes no file. The steps of a pass, and why in that
order: docs/concepts.md, "A compaction pass".

`Compactor` is not thread-safe: one pass at a time per instance (the scheduler keeps a lock per
filesystem); `progress()` may be read from any thread. Several processes may compact one log: the
store serialises them on `<log>/.compact.lock`.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timezone

from loguru import logger

from commitlog import CommitLog, CommitLogError, InvalidArgumentError, StoreFullError, disk_usage, segment_name
from policies.compaction import NO_ROOM
from policies import (CompactionSegment, PlannedOutput, plural, LivenessRule, PendingRanges, PolicyConfig,
                      RetentionConfig, count_dropped, plan_compaction, throttle_delay, too_live_to_compact,
                      within_pass_budget)

from ..audit import AbortReason, AuditTrail, CompactionEntry, audit_time
from .intents import COMPACT, CompactionAudit
from .plan_input import compaction_segments, pass_rule
from .protection import installed_protectors, keyed_refusal, pending_of
from .summary import CompactionResult, LogCompaction, OutputResult
from .look_memory import CompactionMemory, has_marks_file
from ..deletion.owner import OwnedElsewhere
from ..deletion.watched import WatchedLog

__all__ = ["COMPACT", "Compactor", "Pending"]

Pending = Callable[[str], Iterable[tuple[int, int]]]
SegmentFilter = Callable[[Sequence[CompactionSegment], PolicyConfig], bool]

class Compactor:
    """Compaction passes over the logs of `config` (see the module docstring).

    audit: the trail intents and outcomes go to (default: `service.audit`). metrics: a
    `RetentionMetrics` to count in, or None. clock/monotonic/sleep: injectable time. pending: the
    pending-ranges hook (default: the installed protectors'). stop: asked between outputs; True ends the pass (`interrupted`).
    memory: what the last empty looks were made from (`.unchanged`): a log none of whose inputs
    changed is skipped (not with `only_if`); None looks at every log.
    """

    def __init__(self, config: RetentionConfig, *, audit: AuditTrail | None = None, metrics=None,
                 clock: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], object] = time.sleep, pending: Pending | None = None,
                 stop: Callable[[], bool] | None = None, memory: CompactionMemory | None = None) -> None:
        self.config = config
        self.audit = audit if audit is not None else AuditTrail(str(config.service.audit))
        self._trail = CompactionAudit(self.audit, clock)
        self.metrics = metrics
        self._clock, self._mono, self._sleep = clock, monotonic, sleep
        self._pending = pending
        self._stop = stop or (lambda: False)
        self._memory = memory
        self.logs = _WatchedLogs(config)
        self._progress_lock = threading.Lock()
        self._progress: dict | None = None

    # ------------------------------------------------------------------ progress
    def progress(self) -> dict | None:
        """The output being written now: log, outputs done and planned, bytes moved; None when idle."""
        with self._progress_lock:
            return None if self._progress is None else dict(self._progress)

    def _set_progress(self, **changes) -> None:
        with self._progress_lock:
            if self._progress is not None:
                self._progress.update(changes)

    # ------------------------------------------------------------------ a pass
    def run(self, *, names: Iterable[str] | None = None, dry_run: bool = False,
            on_output: Callable[[str, OutputResult], object] | None = None,
            only_if: SegmentFilter | None = None) -> CompactionResult:
        """One pass over `names` (default: every log) whose policy has compaction enabled.
        `on_output(log, output)` is called as each output finishes; `only_if(segments, policy)`
        (used under disk pressure) skips a log for which it is False."""
        started = self._mono()
        at = datetime.fromtimestamp(self._clock(), timezone.utc)
        wanted = [n for n in (names if names is not None else self.config.logs)
                  if self.config.policy_for(n).compaction.enabled]
        if not dry_run:
            self.settle()
        result = CompactionResult(at, [], dry_run=dry_run)
        carried = self._carried(wanted, at) if only_if is None else set()
        for name in wanted:
            if name in carried:   # its last look found nothing, and nothing it was made from changed
                result.logs.append(LogCompaction(name, str(self.config.logs[name].path)))
                continue
            watched = self.logs[name]
            entry = LogCompaction(name, watched.path)
            result.logs.append(entry)
            if only_if is None and self._unchanged(watched, at):
                continue  # nothing it is planned from changed since a look that found nothing to do
            if not watched.exists():
                continue  # not a commit log yet: nothing to compact, nothing wrong
            try:
                stopped = self._log_pass(watched, entry, at, started, dry_run, on_output, only_if)
            except OwnedElsewhere as exc:
                entry.error = str(exc)
                logger.debug("{}: not compacted: {}", name, exc)
                stopped = False
            except (CommitLogError, OSError) as exc:
                entry.error = str(exc)
                logger.error("{}: compaction failed: {}", name, exc)
                stopped = False
            finally:
                with self._progress_lock:
                    self._progress = None
                watched.close()   # done with it: a pass over 10,000 logs holds one open, not all
            if stopped:
                result.interrupted = True
                break
        result.duration = self._mono() - started
        if self.metrics is not None and not dry_run:
            self.metrics.compaction_pass(result.duration)
        return result

    def _carried(self, names: list[str], at: datetime) -> set[str]:
        """The logs whose last empty look stands without a look at each (`CompactionMemory.carried`):
        none unless every protector's pending ranges are decided in the log directory alone."""
        if self._memory is None or self._pending is not None:
            return set()
        try:
            if not all(getattr(p, "decided_in_log_directory", False) for p in installed_protectors()):
                return set()
        except Exception:  # noqa: BLE001 (a protector that cannot load: each log's look says so)
            return set()
        return self._memory.carried(self.config, names, at.timestamp())

    def _unchanged(self, watched: WatchedLog, at: datetime) -> bool:
        if self._memory is None:
            return False

        def pending():
            try:
                return self._hook()(watched.path)
            except Exception:  # noqa: BLE001 (the look says why)
                return None
        return self._memory.unchanged(watched, self.config.policy_for(watched.name), pending, at.timestamp())

    def _hook(self) -> Pending:
        return self._pending if self._pending is not None else pending_of(installed_protectors())

    def _log_pass(self, watched: WatchedLog, entry: LogCompaction, at: datetime, started: float,
                  dry_run: bool, on_output, only_if: SegmentFilter | None) -> bool:
        """Plan and run one log's outputs; True when the budget or a stop ended the pass."""
        policy = self.config.policy_for(watched.name)
        cfg = policy.compaction
        if not cfg.keys and not has_marks_file(watched.path):
            # An unkeyed log drops only records marked dead: with no marks file, nothing to plan,
            # known without claiming or opening the log (whose consumer state's open and close,
            # SQLite's WAL files made and removed, would mark its directory dirty for every pass).
            if self._memory is not None and not (dry_run or only_if):
                self._memory.remember(watched, policy, at.timestamp(), [], None)
            return False
        if not dry_run:
            watched.claim()
        with self._progress_lock:
            self._progress = {"log": watched.name, "outputs_done": 0, "outputs_planned": 0, "bytes_moved": 0,
                              "started_at": audit_time(self._clock())}
        log = watched.log
        # The order matters: the segments (and their end) first, then the marks, then the pending
        # ranges, then the key index up to that end. A Spark writer registering after `pending`
        # appends at or above the end of that moment, so every record the index or an input holds
        # was either settled or inside a pending range; later records never supersede anything here.
        # An unkeyed log's dead records are all marked: the segments whose marks take them below
        # max_live_ratio, with their neighbours, are the plan's whole input (a pass over a large
        # log stats only those).
        infos = log.segments() if cfg.keys else log.segments_with_dead(
            select=lambda info: not too_live_to_compact(cfg, info.live_bytes, info.used_bytes))
        end = infos[-1].end_offset if infos else log.start_offset
        marks = log.marks_snapshot()
        pending = self._protected(watched, entry, cfg.keys)
        if pending is None:
            return False
        rule, live, runs, fresh, moments = pass_rule(log, policy, at, marks, pending, infos, end)
        segments = compaction_segments(infos, live, runs, watched.archived() if watched.archive is not None else None)
        if only_if is not None and not only_if(segments, policy):
            return False
        if fresh and not dry_run:
            log.note_tombstones(fresh)
        plan = plan_compaction(segments, config=cfg, segment_size=log.segment_size,
                               free_bytes=disk_usage(watched.path).free_bytes, now=at)
        entry.planned = len(plan.outputs)
        self._set_progress(outputs_planned=entry.planned)
        if self._memory is not None and not (dry_run or only_if or fresh or plan.outputs) and \
                not any(NO_ROOM in reasons for reasons in plan.kept.values()):
            if cfg.min_age > 0:
                moments += [s.last_timestamp_ms / 1000 + cfg.min_age for s in segments
                            if s.last_timestamp_ms is not None]
            self._memory.remember(watched, policy, at.timestamp(), moments,
                                  (infos[-1].path, infos[-1].used_bytes) if cfg.keys and infos else None)
        if dry_run:
            for out in plan.outputs:
                entry.outputs.append(self._measure(log, marks, rule, out))
            return False
        return self._run_outputs(watched, entry, plan.outputs, segments, marks, rule, cfg, started, on_output)

    def _protected(self, watched: WatchedLog, entry: LogCompaction, keyed: bool) -> PendingRanges | None:
        """The log's pending ranges from the installed protectors (or the injected hook); None,
        with `entry.error` set, when the hook failed or a protector refuses a keyed compaction."""
        try:
            protectors = installed_protectors()
            pending = PendingRanges(self._hook()(watched.path))
            refusal = keyed_refusal(protectors, watched.path) if keyed else None
        except Exception as exc:  # noqa: BLE001 (without the pending ranges nothing is safe to drop)
            entry.error = f"the pending-ranges hook failed, nothing compacted: {exc}"
            logger.error("{}: {}", watched.name, entry.error)
            return None
        if refusal:
            entry.error = refusal
            logger.error("{}: {}", watched.name, entry.error)
            return None
        return pending

    def _run_outputs(self, watched: WatchedLog, entry: LogCompaction, outputs, segments, marks, rule,
                     cfg, started: float, on_output) -> bool:
        """Write the planned `outputs` one at a time, an output refused for room or size retried as
        its two halves; True when the budget or a stop ended the pass."""
        queue = list(outputs)
        by_base = {seg.base_offset: seg for seg in segments}
        while queue:
            out = queue.pop(0)
            if self._stop() or not within_pass_budget(self._mono() - started, cfg):
                return True
            done = self._output(watched, watched.log, marks, rule, cfg, out, entry)
            if done is _SPLIT:
                queue[:0] = [_sub_output(by_base, out.inputs[:len(out.inputs) // 2]),
                             _sub_output(by_base, out.inputs[len(out.inputs) // 2:])]
                entry.planned += 1
                self._set_progress(outputs_planned=entry.planned)
                continue
            if done is None:
                break  # the log's later outputs would meet the same trouble: next pass
            entry.outputs.append(done)
            self._set_progress(outputs_done=len(entry.outputs))
            if on_output is not None:
                on_output(watched.name, done)
        return False

    # ------------------------------------------------------------------ outputs
    def _measure(self, log: CommitLog, marks, rule: LivenessRule, out: PlannedOutput) -> OutputResult:
        """A dry run's output: dropped counted by reading, bytes from the plan."""
        dropped = count_dropped(rule.cause(o, k, t, m) for o, k, t, m in
                                log.record_facts(marks, out.base_offset, out.end_offset))
        return OutputResult(out.base_offset if out.write_bytes else None, out.inputs, out.freed_bytes,
                            out.write_bytes, dropped, out.base_offset, out.end_offset)

    def _output(self, watched: WatchedLog, log: CommitLog, marks, rule: LivenessRule, cfg,
                out: PlannedOutput, entry: LogCompaction):
        """Write one output, audited; None when it could not be done (the reason is logged, and
        recorded in `entry.error` unless the plan was merely overtaken); `_SPLIT` when it did not
        fit in one segment or in the free space and its halves should be tried."""
        at, inputs = self._clock(), tuple(segment_name(b) for b in out.inputs)
        try:
            inodes = tuple(_inodes(watched.path, out.inputs))
        except FileNotFoundError:
            logger.info("{}: segments {} changed since the plan; next pass", watched.name, list(inputs))
            return None
        segment = segment_name(out.base_offset)
        planned = CompactionEntry(time=at, log=watched.name, path=os.path.join(watched.path, segment),
                                  segment=segment, inputs=inputs, first_offset=out.base_offset,
                                  end_offset=out.end_offset, bytes_before=out.freed_bytes,
                                  planned_bytes_after=out.write_bytes, input_inodes=inodes)
        ident = self._trail.intent(planned, entry)
        if ident is None:
            return None
        throttle = _throttle(cfg.max_bytes_per_second, self._mono, self._sleep, self._set_progress)
        try:
            done = log.compact([list(out.inputs)], rule.cause, marks=marks, on_bytes=throttle)
        except StoreFullError as exc:
            if len(out.inputs) > 1:
                # The store wants room for the inputs' used bytes plus a segment (it learns what is
                # live only while copying), more than the plan's live bytes: halves need less.
                self._trail.aborted(ident, planned, AbortReason.NO_ROOM, exc, None)
                return _SPLIT
            return self._trail.aborted(ident, planned, AbortReason.NO_ROOM, exc, entry)
        except InvalidArgumentError as exc:
            if len(out.inputs) > 1 and tuple(_inodes(watched.path, out.inputs)) == inodes:
                # Inputs unchanged: their live records and gaps outgrew one segment (the plan's gap
                # estimate fell short); nothing was swapped, so each half is tried on its own.
                self._trail.aborted(ident, planned, AbortReason.TOO_LARGE, exc, None)
                return _SPLIT
            # A head removal or another compaction took an input first: not a failure.
            return self._trail.aborted(ident, planned, AbortReason.INPUTS_CHANGED, exc, None)
        except (CommitLogError, OSError) as exc:
            return self._trail.aborted(ident, planned, AbortReason.ERROR, exc, entry)
        except BaseException as exc:
            self._trail.aborted(ident, planned, AbortReason.ERROR, exc, entry)
            raise
        if not done:
            return self._trail.aborted(ident, planned, AbortReason.ERROR, "the store compacted nothing", entry)
        o = done[0]
        result = OutputResult(o.segment, tuple(o.inputs), o.bytes_before, o.bytes_after,
                              dict(count_dropped(()), **o.dropped), out.base_offset, out.end_offset)
        self._trail.compacted(ident, replace(planned, segment=None if o.segment is None else segment_name(o.segment),
                                             bytes_before=o.bytes_before, bytes_after=o.bytes_after,
                                             dropped=result.to_json_dict()["dropped"]))
        if self.metrics is not None:
            self.metrics.compacted(watched.name, reclaimed=result.reclaimed_bytes, read=out.read_bytes,
                                   written=o.bytes_after)
        logger.info("{}: compacted {} from {} into {} ({} -> {} bytes, dropped {})", watched.name,
                    plural(len(o.inputs), "segment"), planned.segment, "nothing (a gap)" if o.segment is None else
                    segment_name(o.segment), o.bytes_before, o.bytes_after, result.dropped)
        return result

    def settle(self) -> int:
        """Settle the compaction intents of dead processes for this compactor's logs; how many.
        After a kill, the store also finishes what the dead process left (inputs superseded by an
        output, `.cleaned` files): else they hold their disk space until a later compaction has
        work on that log, or its writer reopens it."""
        settled = self._trail.settle(lambda: {os.path.abspath(str(cfg.path)): self.logs[name]
                                              for name, cfg in self.config.logs.items()})
        for w in list(self.logs.values()) if settled else ():
            try:
                if w.exists():
                    w.log.compact([], _keep)   # no run: only the interrupted swaps are finished
            except (CommitLogError, OSError) as exc:
                logger.warning("{}: the leftovers of an interrupted compaction stay for now: {}", w.name, exc)
        return settled

    def close(self) -> None:
        for w in self.logs.values():
            w.close()


_SPLIT = object()                         # _output's answer: try the output's two halves instead


class _WatchedLogs(dict):
    """Name -> `WatchedLog` of a configuration's logs, each made when first asked for: a job that
    carries 10,000 logs makes none."""

    def __init__(self, config: RetentionConfig) -> None:
        super().__init__()
        self._config = config

    def __missing__(self, name: str) -> WatchedLog:
        watched = self[name] = WatchedLog(name, self._config.logs[name],
                                          archive=self._config.policy_for(name).archive)
        return watched


def _throttle(rate: int, monotonic: Callable[[], float], sleep: Callable[[float], object],
              report: Callable[..., None]) -> Callable[[int], None]:
    """An output's `on_bytes`: reports the bytes moved (`report(bytes_moved=)`) and sleeps to hold
    them to `rate` a second (`throttle_delay`)."""
    start, moved = monotonic(), 0

    def on_bytes(n: int) -> None:
        nonlocal moved
        moved += n
        report(bytes_moved=moved)
        delay = throttle_delay(moved, monotonic() - start, rate)
        if delay > 0:
            sleep(delay)
    return on_bytes


def _keep(*_) -> None:
    return None


def _inodes(path: str, bases: Iterable[int]) -> list[int]:
    return [os.stat(os.path.join(path, segment_name(b))).st_ino for b in bases]


def _sub_output(by_base: dict[int, CompactionSegment], inputs: Sequence[int]) -> PlannedOutput:
    segs = [by_base[b] for b in inputs]
    return PlannedOutput(tuple(inputs), segs[-1].end_offset, sum(s.used_bytes for s in segs),
                            sum(s.live_bytes for s in segs), sum(s.size_bytes for s in segs))

