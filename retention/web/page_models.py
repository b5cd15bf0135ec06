"""The status page's data (`GET /ui/data`, built by retention/web/page.py) as pydantic models, on
the `/status` models it shares (retention/scheduling/status_models.py). Plain data: thread-safe.
"""

from __future__ import annotations

from ..scheduling.status_models import (ArchiveStatus, BudgetView, CompactionLogLast, ConsumerGroup, HealthView,
                                        HungSegment, LastPass, Number, PinnedFileView, StrictModel)

__all__ = ["Deletion", "PageData", "PageFilesystem", "PageLog", "PageLogCompaction", "PageService", "PagePinned",
           "PassEntry", "Rules", "Run"]


class PageService(StrictModel):
    pid: int
    healthy: bool
    problems: list[str]
    warnings: list[str]
    ready: bool
    uptime_seconds: Number
    config_loaded_at: str | None
    audit: str
    config: str
    health: HealthView


class PageFilesystem(StrictModel):
    """A filesystem with the lowest thresholds of its logs' policies and its last hour of used ratios."""

    mountpoint: str
    logs: list[str]
    used_ratio: Number | None
    total_bytes: int | None
    free_bytes: int | None
    pressure: str
    forcing: bool
    clean_ratio: Number
    force_ratio: Number
    refuse_writes_ratio: Number
    force_target: Number
    history: list[list[Number]]


class Run(StrictModel):
    """Consecutive segments the next pass treats alike (`mixed`: merged neighbours, with `dominant`
    and `mix`, the segments of each kind)."""

    kind: str
    reasons: list[str]
    overridden_by: str | None
    why: str
    count: int
    bytes: int
    first: str
    first_offset: int
    oldest_age_seconds: Number
    live_ratio: Number | None
    last: str
    last_offset: int
    newest_age_seconds: Number
    dominant: str | None = None
    mix: dict[str, int] | None = None


class PageLogCompaction(StrictModel):
    live_ratio: Number | None
    last: CompactionLogLast | None


class PageLog(StrictModel):
    name: str
    path: str
    policy: str
    exists: bool
    not_created: bool
    next_pass_at: str | None
    next_delete_window: str | None
    rules: str
    compaction: PageLogCompaction
    archive: ArchiveStatus | None
    segments: int | None
    bytes: int | None
    retention_bytes: int | None
    overridden: list[str]
    start_offset: int | None
    end_offset: int | None
    mountpoint: str | None
    triggers: list[str]
    counts: dict[str, int]
    runs: list[Run]
    consumer_groups: list[ConsumerGroup]
    hung: list[HungSegment]
    pinned_bytes: int
    last_pass: LastPass | None
    manual_passes_left: int
    error: str | None


class PagePinned(PinnedFileView):
    log: str


class Deletion(StrictModel):
    """A deletion of the audit trail (fields missing from an old line are null)."""

    time: str | None
    log: str | None
    segment: str | None
    bytes: int | None
    triggers: list[str] | None
    forced: bool | None
    overridden_by: str | None
    archived: bool
    unconsumed: list[str | None]
    budget: str | None = None
    """The figures of the shared byte budget that took it (absent for any other deletion)."""


class Rules(StrictModel):
    """What the page shows of a policy in force."""

    delete_at_hours: str
    reserve_seconds: Number
    compaction_enabled: bool
    max_live_ratio: Number


class PassEntry(StrictModel):
    at: str
    kind: str
    logs: list[str]
    outcome: str
    deleted: int
    freed_bytes: int
    duration_seconds: Number
    error: str | None = None


class PageData(StrictModel):
    """The `/ui/data` answer."""

    generated_at: Number
    plan_at: str
    service: PageService
    filesystems: list[PageFilesystem]
    logs: list[PageLog]
    logs_not_shown: int
    pinned: list[PagePinned]
    deletions: list[Deletion]
    rules: dict[str, Rules]
    passes: list[PassEntry]
    budgets: dict[str, BudgetView]

