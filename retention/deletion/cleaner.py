"""The cleaner: takes a snapshot, asks `policies` for a plan, and executes it through the store's
crash-safe head removal, with the pause between files, the byte rate (`disk.delete_rate`, see
`.pacer`), hung-segment handling, audit and log lines.

RocketMQ's semantics: at most `files_per_pass` deletions per log, `pause_between_files` between
them, oldest first, stopping at the first failure; a held segment becomes hung, is retried every
`retry_every` and forced after `force_after`.

Audit (see `retention.audit` and `.audited_removal`): each removal's intent is fsynced before
`remove_head`, its outcome appended after; a pass first settles intents whose process died, from
the log's start offset, so a SIGKILL anywhere leaves no removal unaudited. Lines that cannot be
written are logged in full at ERROR and kept in memory for the next append.

Another process (a second sidecar, an embedded cleaner) removing a planned segment first is not a
failure: it is logged at INFO and the pass goes on with the next planned segment.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timezone

from loguru import logger

from policies import NO_MANUAL_TRIGGER, ManualTrigger, Plan, RetentionConfig, plan

from commitlog.damage import read_damage

from ..archiving.cluster_cache import CopyEviction, is_cache
from ..audit import AuditTrail
from .clockguard import ClockGuard
from .pacer import Pacing
from .audited_removal import AuditedRemoval
from .logreads import LogReads, PassReads
from .pinned import find_pinned
from .results import LogPassResult, PassResult  # re-exported
from .unchanged import PlanMemory, carried_result
from .watched import WatchedLog


class Cleaner:
    """Runs cleanup passes over the configured logs.

    Thread-safe: passes are serialised by a lock, manual triggers may be opened from any thread,
    and `stop()` from any thread cuts a running pass short between two files or in a pacing wait
    (never between a rename and its unlink). Several processes may clean the same log; the store serialises their
    removals."""

    def __init__(self, config: RetentionConfig, *, clock: Callable[[], float] = time.time,
                 audit: AuditTrail | None = None, guard: ClockGuard | None = None) -> None:
        self.config = config
        self._clock = clock
        self.guard = guard      # a pass at the clock's time judges expiry at the guard's trusted now
        self.audit = audit if audit is not None else AuditTrail(str(config.service.audit))
        found = config.discovered
        self._opened: set[str] = set()     # the logs whose read-only open is open (WatchedLog keeps it)
        self.logs = {name: WatchedLog(name, cfg, archive=config.policy_for(name).archive, real_dir=name in found,
                                      opened=self._opened)
                     for name, cfg in config.logs.items()}
        self.manual: dict[str, ManualTrigger] = {}
        self._pass_lock = threading.Lock()
        self._manual_lock = threading.Lock()
        self._stop = threading.Event()
        self._pacing = Pacing(self._stop)
        self._removal = AuditedRemoval(self.audit, clock, self._pacing)
        self._copies = CopyEviction(self.audit, clock)
        self.memory = PlanMemory()     # what each log's last plan was made from (.unchanged)
        self._unpinned: set[str] = set()   # logs whose last pin scan found no file of theirs held open
        self.last_result: PassResult | None = None    # the last pass's, None while one runs

    # ------------------------------------------------------------------ triggers
    def trigger_manual(self, *, force: bool = False, policies: Iterable[str] | None = None,
                       passes: int | None = None) -> None:
        """Open `passes` passes (default: each policy's `manual_passes`) that ignore the hour window
        (and the age, with `force`)."""
        with self._manual_lock:
            for name in policies if policies is not None else self.config.policies:
                self.manual[name] = ManualTrigger.open(passes or self.config.policies[name].manual_passes, force)

    def stop(self) -> None:
        """Cut the running pass short before its next file, and refuse to start new ones."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # ------------------------------------------------------------------ planning
    def plan(self, now: datetime | None = None, *, names: Iterable[str] | None = None) -> PassResult:
        """What a pass would do at `now` (default: the clock, and the guard's trusted now), without doing it."""
        at = now or datetime.fromtimestamp(self._clock(), timezone.utc)
        names = None if names is None else self.config.budget_partners(names)
        results, _ = self._plan(at, names, LogReads(), trusted=self._trusted(now))
        self._attach_pins(results, False, names)
        return PassResult(at, results, executed=False)

    def _plan(self, at: datetime, names: Iterable[str] | None, reads: LogReads, *,
              trusted: datetime | None = None) -> tuple[list[LogPassResult], Plan]:
        """Each watched log read by `reads` (`PassReads` for a pass) and planned at `at`: its result
        with its plan, or why it has none."""
        with self._manual_lock:
            manual = dict(self.manual)
        results = []
        for w in (self.logs[n] for n in (names if names is not None else self.logs)):
            results.append(reads.read(w, self.config.policy_for(w.name), at,
                                      manual.get(w.config.policy, NO_MANUAL_TRIGGER)))
            w.release_if_tight()
        pass_plan = plan([r.snapshot for r in results if r.snapshot is not None], self.config.policies_in_force,
                         at, manual, trusted_now=trusted, budgets=self.config.budgets)
        by_name = {lp.name: lp for lp in pass_plan.logs}
        for r in results:
            r.plan = by_name.get(r.name)
            if r.plan is not None:
                # One line per decision, built only when TRACE is on (lazy).
                logger.opt(lazy=True).trace("decisions:\n{}", r.plan.explain)
        return results, pass_plan

    def _note_damage(self, results: list[LogPassResult], at: datetime) -> None:
        """Each log's damage record (commitlog.damage) onto its result, for health; the entries
        the audit trail does not hold yet are audited (`damaged` lines)."""
        for r in results:
            if r.not_created or r.owned_elsewhere or (r.plan is None and r.permission_denied):
                continue    # nothing read: a directory its user may not read holds no news of damage
            r.damage = read_damage(r.path)
            if not r.damage:
                continue
            try:
                self.audit.audit_damage(r.name, r.path, r.damage, at.timestamp())
            except OSError as exc:
                logger.error("{}: the audit trail {} cannot be written: the damage of {} is not "
                             "audited yet: {}", r.name, self.audit.path, r.path, exc)

    def _trusted(self, now: datetime | None) -> datetime | None:
        """The guard's trusted now for a pass at the clock's time; None for an explicit `now`."""
        trusted = self.guard.trusted_now() if self.guard is not None and now is None else None
        return None if trusted is None else datetime.fromtimestamp(trusted, timezone.utc)

    def _attach_pins(self, results: list[LogPassResult], all_carried: bool, names: Iterable[str] | None) -> None:
        """Each result's files deleted and held open by a process (`find_pinned`, a walk of every
        process's descriptors: 40 ms a pass here, whatever the logs). Not walked when every log is
        carried (`all_carried`: `names`, None for all, are the carried logs) and the last walk found none of them held: a carried log lost no
        file since (its key holds its directory's entries), so none of its files can have become held."""
        if all_carried and self._unpinned.issuperset(names if names is not None else self.logs):
            return                   # a carried result's pinned is [] (unchanged.carried_result)
        pins = find_pinned([r.path for r in results])
        for i, r in enumerate(results):
            prefix = r.path.rstrip("/") + "/"
            pinned = [p for p in pins if p.path.startswith(prefix)]
            if not r.unchanged:
                r.pinned = pinned
            elif pinned:             # the carried result is the one every carrying pass gives: copied
                results[i] = carried_result(r, pinned)
            (self._unpinned.discard if pinned else self._unpinned.add)(r.name)

    # ------------------------------------------------------------------ doing
    def run_pass(self, now: datetime | None = None, *, names: Iterable[str] | None = None,
                 sleep: Callable[[float], object] | None = None, forcing: bool = False,
                 dev: int | None = None) -> PassResult:
        """Plan and execute one pass. `sleep` waits between files (default: an interruptible wait
        that `stop()` ends early); `forcing`: a disk force is under way (`policies.pressure`) on
        filesystem `dev` (the logs' group), forcing no log read on another disk (None: any)."""
        wait = sleep or self._stop.wait
        # A budget's logs are decided together: a pass over one is a pass over all (a disk force
        # under way is the named logs' filesystem's, not a partner's elsewhere).
        partners: frozenset[str] = frozenset()
        if names is not None:
            names = list(names)
            expanded = self.config.budget_partners(names)
            partners, names = frozenset(expanded[len(names):]), expanded
        reads = PassReads(forcing, budgeted=frozenset(self.config.budget_of), unforced=partners, forced=dev)
        with self._pass_lock:
            started = time.monotonic()
            self.last_result = None     # a pass never holds the last one's results beside its own
            at = now or datetime.fromtimestamp(self._clock(), timezone.utc)
            self._removal.settle_intents(self.logs, names)
            trusted = self._trusted(now)
            todo, carried = self._split(names, reads, at, trusted)
            copies = self._evict_copies(at, todo, forcing)   # before any log: a cache goes first
            results, pass_plan = self._plan(at, todo, reads, trusted=trusted)
            for r in results:
                if r.cache is not None:
                    r.cache = copies.get(r.name, {})
            self._consume_manual(pass_plan)
            self._pacing.begin_pass()
            interrupted = self._execute(results, wait)
            self._note_damage(results, at)
            self._remember(results, reads, at, held=trusted is not None)
            for r in results:      # an execution opens a log again: none stays open between passes
                self.logs[r.name].release_if_tight()
            all_carried = not results
            results = self._in_order(results + carried, names)
            self._attach_pins(results, all_carried, names)
            result = PassResult(at, results, executed=True, duration=time.monotonic() - started,
                                interrupted=interrupted)
            self.last_result = result
            return result

    def _split(self, names: Iterable[str] | None, reads: PassReads, at: datetime,
               trusted: datetime | None) -> tuple[list[str], list[LogPassResult]]:
        """(the logs this pass plans, the results carried for the others: `.unchanged`); a carried
        log's read-only open is closed (its descriptors and store objects, ~6 KB: an idle log holds
        only its claim), opened again when it next changes."""
        with self._manual_lock:
            manual = dict(self.manual)
        watched = [self.logs[n] for n in (names if names is not None else self.logs)]
        todo, carried = self.memory.split(watched, self.config.policies_in_force, reads.disk_on, manual, at,
                                          trusted=trusted is not None, partners=self.config.budget_partners)
        left_open = self._opened - set(todo)      # the carried logs' opens among them: not a look at each
        if left_open:
            for name in left_open.intersection(names if names is not None else self.logs):
                self.logs[name].release_log()
        return todo, carried

    def _remember(self, results: list[LogPassResult], reads: PassReads, at: datetime, *, held: bool) -> None:
        for r in results:
            self.memory.remember(self.logs[r.name], r, self.config.policy_for(r.name), reads.disk_on, at,
                                 held=held)

    def _in_order(self, results: list[LogPassResult], names: Iterable[str] | None) -> list[LogPassResult]:
        by_name = {r.name: r for r in results}
        return [by_name[n] for n in (names if names is not None else self.logs) if n in by_name]

    def _evict_copies(self, at: datetime, names: Iterable[str] | None, forcing: bool) -> dict[str, dict]:
        """Each watched cache's eviction run (retention.archiving.cluster_cache), by log name."""
        with self._manual_lock:
            manual = dict(self.manual)
        return {w.name: self._copies.run(w.name, w.path, self.config.policy_for(w.name), at, forcing=forcing,
                                         manual=manual.get(w.config.policy, NO_MANUAL_TRIGGER))
                for w in (self.logs[n] for n in (names if names is not None else self.logs))
                if not w.exists() and is_cache(w.path)}

    def _consume_manual(self, pass_plan: Plan) -> None:
        used = {lp.policy for lp in pass_plan.logs}
        with self._manual_lock:
            for name in used:
                if name in self.manual:
                    self.manual[name] = self.manual[name].after_pass()

    def _execute(self, results: list[LogPassResult], wait: Callable[[float], object]) -> bool:
        """Delete the planned segments, globally oldest first; return True if cut short by stop()."""
        # Oldest first across logs (the log whose next segment is oldest), each log in its own
        # head-first order: a sort by age alone took a segment older than the head before it (a
        # compaction's output, a short roll), its removal refused (not the head) at every pass.
        planned = heapq.merge(*([(d.age_seconds, order, r, d) for d in r.plan.to_delete]
                                for order, r in enumerate(results) if r.plan is not None),
                              key=lambda t: (-t[0], t[1]))
        stopped_logs: set[str] = set()
        first = True
        for _, _, r, decision in planned:
            if r.name in stopped_logs:
                continue
            if self._stop.is_set():
                return True
            policy = self.config.policy_for(r.name)
            self._pacing.before(r, policy, 0.0 if first else policy.pause_between_files, wait)
            if self._stop.is_set():
                return True
            first = False
            if not self._removal.remove(r, decision, self.logs[r.name], policy, wait):
                stopped_logs.add(r.name)  # stop at the first failure, as RocketMQ does
        return False

    def close(self) -> None:
        for w in self.logs.values():
            w.close()
