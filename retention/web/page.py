"""The status page: `GET /` serves one self-contained HTML file (retention/web/static/status.html, every
asset inline) that polls `GET /ui/data`, the `PageData` (retention/web/page_models.py) built here from
the scheduler's own `status_report()`, `plan()` and `history`, plus the tail of the audit trail.

Bounded for any size of log: a log's segments, oldest first, are drawn as runs of consecutive
segments that the next pass would treat alike (same action and reasons), at most `max_runs` bars per
log (neighbouring runs are merged into a "mixed" bar beyond that, with the count of each kind), and a
budget of `TOTAL_RUNS` bars shared by all logs; the lists (deletions, passes, pinned files, consumer
groups, hung segments) are capped too. So the JSON stays in the tens of kilobytes whether a log has
ten segments or 100,000.

Thread-safe: `PageBuilder.json_bytes()` may be called from any number of request threads; a build
is shared by the requests that arrive within `min_interval` of it, or five times the last build's
duration if longer (a plan over 100,000 segments is not free, and a page left open in several tabs
must not multiply it).
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from importlib import resources

from policies import DELETED, PolicyConfig, SegmentDecision, format_hours, next_delete_window
from policies.reasons import ACTIVE, ARCHIVED, HELD, NOT_ARCHIVED, NO_TRIGGER, PREFIX, RESERVED, BATCH_LIMIT

from ..scheduling.jobs import cleanup_job
from ..scheduling.status_models import FilesystemView, LogStatus, Status
from .page_models import PageData, PageFilesystem, PageLog, PagePinned, PageService

__all__ = ["PageBuilder", "build_page_data", "page_html", "segment_runs", "tail_audit", "TOTAL_RUNS", "MAX_RUNS"]

MAX_RUNS = 240               # bars per log at most
TOTAL_RUNS = 2400            # bars over all logs at most (each log gets at least MIN_RUNS)
MIN_RUNS = 12
MAX_LOGS = TOTAL_RUNS // MIN_RUNS  # logs drawn at most (the largest first beyond it)
DELETIONS = 20               # last audit lines shown
AUDIT_TAIL_BYTES = 256 << 10  # at most this much of the audit file is read per refresh
LIST_CAP = 50                # pinned files, hung segments, consumer groups per log, passes

# Kinds of bar; the page colours them, a few kinds to a legend entry (status.html, `LEGEND`).
# `evict`: a deletion of a segment the log's archive tier holds (nothing is lost).
DELETE, EVICT, ACTIVE_KIND, HUNG_KIND, MIXED = "delete", "evict", "active", "hung", "mixed"
KEEP_KINDS = {NO_TRIGGER: "no-trigger", RESERVED: "reserved", PREFIX: "prefix", BATCH_LIMIT: "batch-limit",
              NOT_ARCHIVED: "not-archived"}


def page_html() -> bytes:
    """The page itself (package data, so it ships in the wheel)."""
    return resources.files("retention.web").joinpath("static/status.html").read_bytes()


# ---------------------------------------------------------------------- segment strip
def _kind(d: SegmentDecision) -> str:
    """What colours a segment: the action, else the first reason (the planner lists them in the
    order that decides: active, no-trigger, reserved, unconsumed, held, prefix, batch-limit), where
    no-trigger counts only when it is the sole reason; a deletion of an archived segment is `evict`."""
    if d.action == DELETE:
        return EVICT if ARCHIVED in d.because else DELETE
    # Without a trigger nothing goes; the next reason says what would keep it once one is active.
    reasons = [r for r in d.reasons if r != NO_TRIGGER] or list(d.reasons)
    first = reasons[0] if reasons else ""
    if first == ACTIVE:
        return ACTIVE_KIND
    if first == HELD or HELD in d.reasons:
        return HUNG_KIND
    if first.startswith("unconsumed:"):
        return "unconsumed"
    return KEEP_KINDS.get(first, "keep")


def segment_runs(decisions: Sequence[SegmentDecision], max_runs: int = MAX_RUNS) -> list[dict]:
    """Consecutive segments with the same kind, reasons and overriding trigger as one run each,
    oldest first; beyond `max_runs` runs, neighbours are merged into `mixed` runs (with `mix`, the
    segments of each kind) so that at most `max_runs` are returned.

    A run: kind, reasons, overridden_by, count, bytes, first/last segment and base offset, the ages
    (seconds since the last write) of its oldest and newest segment, and `live_ratio`: the live
    share of the record bytes of its segments whose live bytes are known (None: none is)."""
    runs: list[dict] = []
    sums: list[list[int]] = []   # per run: live bytes, used bytes, segments whose live bytes are known
    key = None
    for d in decisions:
        k = (_kind(d), d.reasons, d.overridden_by)
        if k != key:
            key = k
            runs.append({"kind": k[0], "reasons": list(d.reasons), "overridden_by": d.overridden_by,
                         "why": d.why(), "count": 0, "bytes": 0, "first": d.segment, "first_offset": d.base_offset,
                         "oldest_age_seconds": round(d.age_seconds, 1), "live_ratio": None})
            sums.append([0, 0, 0])
        run = runs[-1]
        run["count"] += 1
        run["bytes"] += d.bytes
        run["last"], run["last_offset"] = d.segment, d.base_offset
        run["newest_age_seconds"] = round(d.age_seconds, 1)
        if d.live_bytes is not None and d.used_bytes is not None:
            mine = sums[-1]
            mine[0] += d.live_bytes
            mine[1] += d.used_bytes
            mine[2] += 1
    if len(runs) > max_runs:
        per = math.ceil(len(runs) / max(1, max_runs))
        groups = [range(i, min(i + per, len(runs))) for i in range(0, len(runs), per)]
    else:
        groups = [range(i, i + 1) for i in range(len(runs))]
    out = []
    for g in groups:
        run = _merge([runs[i] for i in g])
        if any(sums[i][2] for i in g):
            used = sum(sums[i][1] for i in g)
            run["live_ratio"] = sum(sums[i][0] for i in g) / used if used else 1.0
        out.append(run)
    return out


def _merge(group: list[dict]) -> dict:
    if len(group) == 1:
        return group[0]
    mix: dict[str, int] = {}
    for r in group:
        mix[r["kind"]] = mix.get(r["kind"], 0) + r["count"]
    first, last = group[0], group[-1]
    return {"kind": MIXED, "dominant": max(mix, key=mix.get), "mix": mix, "reasons": [], "overridden_by": None,
            "why": "",
            "count": sum(r["count"] for r in group), "bytes": sum(r["bytes"] for r in group),
            "first": first["first"], "first_offset": first["first_offset"], "last": last["last"],
            "last_offset": last["last_offset"], "oldest_age_seconds": first["oldest_age_seconds"],
            "newest_age_seconds": last["newest_age_seconds"], "live_ratio": None}


def _counts(decisions: Iterable[SegmentDecision]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for d in decisions:
        k = _kind(d)
        counts[k] = counts.get(k, 0) + 1
    return counts


def _rules_key(log: LogStatus, rules: dict[str, dict], policy: PolicyConfig) -> str:
    """The key in `rules` of what the page shows of ``log``'s policy in force (its own with overrides)."""
    key = f"log:{log.name}" if log.overrides else f"policy:{log.policy}"
    if key not in rules:
        rules[key] = {"delete_at_hours": format_hours(policy.delete_at_hours), "reserve_seconds": policy.reserve,
                      "compaction_enabled": policy.compaction.enabled,
                      "max_live_ratio": policy.compaction.max_live_ratio}
    return key


def _live_ratio(decisions: Iterable[SegmentDecision]) -> float | None:
    """The live share of the record bytes of the segments whose live bytes are known (None: none)."""
    live = used = 0
    for d in decisions:
        if d.live_bytes is not None and d.used_bytes is not None:
            live += d.live_bytes
            used += d.used_bytes
    return live / used if used else None


# ---------------------------------------------------------------------- audit trail
def tail_audit(path: str, limit: int = DELETIONS, max_bytes: int = AUDIT_TAIL_BYTES) -> list[dict]:
    """The last `limit` deletions of the audit file, newest first, reading at most `max_bytes` from
    its end (intent and aborted lines are not deletions). A torn last line (a writer mid-append, a crash) and lines that are not JSON objects are
    skipped; a missing file is no entries."""
    try:
        with open(path, "rb") as f:
            end = f.seek(0, os.SEEK_END)
            start = max(0, end - max_bytes)
            f.seek(start)
            chunk = f.read(end - start)
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        return []
    lines = chunk.split(b"\n")
    if start > 0:
        lines = lines[1:]        # the first line may begin before the window
    if lines and not chunk.endswith(b"\n"):
        lines = lines[:-1]       # torn: the append is not finished
    out: list[dict] = []
    for line in reversed(lines):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("event", DELETED) == DELETED:
            out.append(entry)
            if len(out) >= limit:
                break
    return out


def _deletion(e: dict) -> dict:
    return {"time": e.get("time"), "log": e.get("log"), "segment": e.get("segment"), "bytes": e.get("bytes"),
            "triggers": e.get("triggers"), "forced": e.get("forced"), "overridden_by": e.get("overridden_by"),
            "archived": bool(e.get("archived")),
            "unconsumed": [u.get("group") for u in (e.get("unconsumed") or [])][:LIST_CAP],
            **({"budget": e["budget"]} if isinstance(e.get("budget"), str) else {})}


# ---------------------------------------------------------------------- the page's data
class PageBuilder:
    """Builds the `/ui/data` object of a `RetentionScheduler`; see the module docstring."""

    def __init__(self, scheduler, *, min_interval: float = 1.0, clock=time.time) -> None:
        self.scheduler = scheduler
        self.min_interval = min_interval
        self._clock = clock
        self._lock = threading.Lock()
        self._built_at = -math.inf
        self._cached: bytes | None = None
        self._build_seconds = 0.0

    def json_bytes(self) -> bytes:
        """The page data as compact JSON, shared by requests within `min_interval`."""
        with self._lock:
            now = time.monotonic()
            # A build that took long (a plan over 100,000 segments) is reused longer: an open page
            # costs the sidecar at most a fifth of a core.
            if self._cached is None or now - self._built_at >= max(self.min_interval, 5 * self._build_seconds):
                self._cached = json.dumps(self.data().to_json(), separators=(",", ":"), default=str).encode()
                self._built_at = time.monotonic()
                self._build_seconds = self._built_at - now
            return self._cached

    def data(self) -> PageData:
        scheduler = self.scheduler
        status = scheduler.status_report()
        config = scheduler.config
        return build_page_data(status, scheduler.plan(), config.policies_in_force, scheduler.history,
                               tail_audit(status.audit), self._clock())


def build_page_data(status: Status, result, policies: Mapping[str, PolicyConfig], history, deletions: list[dict],
                    now: float) -> PageData:
    """The `/ui/data` answer from the scheduler's `status_report()`, a `plan()` result (`PassResult`),
    the policy in force of each log by name, the `StatusHistory`, the audit tail (newest first) and the time."""
    plans = {r.name: r for r in result.logs}
    rules: dict[str, dict] = {}   # what the page shows of each policy in force, once for the logs sharing it
    budget = max(MIN_RUNS, min(MAX_RUNS, TOTAL_RUNS // max(1, len(status.logs))))
    shown = status.logs
    if len(shown) > MAX_LOGS:      # the largest logs are the ones an operator with a full disk needs
        shown = sorted(shown, key=lambda log: -(log.bytes or 0))[:MAX_LOGS]
    at = datetime.fromtimestamp(now, timezone.utc)
    logs = [_page_log(log, plans.get(log.name), status, policies[log.name], rules, budget, at) for log in shown]
    pinned = [PagePinned(**p.model_dump(), log=log.name) for log in status.logs for p in log.pinned][:LIST_CAP]
    return PageData(
        generated_at=now, plan_at=result.at.isoformat(),
        service=status.model_dump(include=set(PageService.model_fields), exclude_unset=True),
        filesystems=[_page_filesystem(fs, policies, history, now) for fs in status.filesystems],
        logs=logs, logs_not_shown=max(0, len(status.logs) - len(logs)),
        pinned=pinned, deletions=[_deletion(e) for e in deletions], rules=rules,
        passes=history.passes()[:LIST_CAP // 2], budgets=status.budgets,
    )


def _page_filesystem(fs: FilesystemView, policies: Mapping[str, PolicyConfig], history, now: float) -> PageFilesystem:
    """A filesystem with the lowest thresholds of its logs' policies and its last hour of used ratios."""
    ds = [policies[n].disk for n in fs.logs]
    return PageFilesystem(
        mountpoint=fs.mountpoint, logs=fs.logs[:LIST_CAP], used_ratio=fs.used_ratio,
        total_bytes=fs.total_bytes, free_bytes=fs.free_bytes, pressure=fs.pressure, forcing=fs.forcing,
        clean_ratio=min(d.clean_ratio for d in ds), force_ratio=min(d.force_ratio for d in ds),
        refuse_writes_ratio=min(d.refuse_writes_ratio for d in ds),
        force_target=min(d.force_target_ratio for d in ds),
        history=history.disk_series(fs.mountpoint, now))


def _page_log(log: LogStatus, r, status: Status, policy: PolicyConfig, rules: dict[str, dict], budget: int,
              at: datetime) -> PageLog:
    """One log on the page: its `/status` entry with the runs of its plan `r` (a `LogPassResult`, or None)."""
    lp = r.plan if r is not None else None
    decisions = lp.decisions if lp is not None else ()
    window = next_delete_window(policy, at)
    return PageLog(
        name=log.name, path=log.path, policy=log.policy, exists=log.exists, not_created=not log.exists,
        next_pass_at=status.next_run(cleanup_job(log.policy)),
        next_delete_window=None if window is None else window.isoformat(),
        rules=_rules_key(log, rules, policy),
        compaction={"live_ratio": _live_ratio(decisions), "last": status.compaction.logs.get(log.name)},
        archive=status.archive.get(log.name),
        segments=len(decisions) if lp is not None else log.segments,
        bytes=sum(d.bytes for d in decisions) if lp is not None else log.bytes,
        retention_bytes=log.retention_bytes, overridden=sorted(log.overrides),
        start_offset=log.start_offset, end_offset=log.end_offset, mountpoint=log.disk.mountpoint,
        triggers=list(lp.triggers) if lp is not None else log.triggers,
        counts=_counts(decisions), runs=segment_runs(decisions, budget),
        consumer_groups=log.consumer_groups[:LIST_CAP], hung=log.hung[:LIST_CAP],
        pinned_bytes=log.pinned_bytes, last_pass=log.last_pass, manual_passes_left=log.manual_passes_left,
        error=(r.error if r is not None else None) or (log.error if log.exists else None),
    )
