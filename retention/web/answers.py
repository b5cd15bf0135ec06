"""The answers of the sidecar's endpoints other than `/status` and `/ui/data` (those are
retention/scheduling/status_models.py and retention/web/page_models.py) as pydantic models: the
probes, `/plan` and `POST /clean`, `POST /compact`, `/offsets`, `POST /clock/accept`, and every
error body. The OpenAPI document (retention/web/openapi.py) is generated from them; a key an answer
has only sometimes has a default and is not required. Plain data: thread-safe.
"""

from __future__ import annotations

from typing import Any, Literal

from ..scheduling.status_models import (CompactionResultView, Number, OwnedBy, PinnedFileView, ProblemDetail,
                                        StrictModel)

__all__ = ["ClockAccepted", "ClockAnswer", "CompactAnswer", "ErrorAnswer", "HealthAnswer", "LiveAnswer",
           "OffsetsAnswer", "OffsetsLog", "PlanAnswer", "PlanDisk", "PlanFile", "PlanLog", "ReadyAnswer"]


class HealthAnswer(StrictModel):
    """`/healthz`: `problems` (critical) and `warnings` as lines, `details` one object per problem."""

    status: Literal["ok", "warning", "unhealthy"]
    problems: list[str]
    warnings: list[str]
    details: list[ProblemDetail]


class LiveAnswer(StrictModel):
    """`/livez`: the problem a restart can fix, if any."""

    status: Literal["ok", "unhealthy"]
    problems: list[str]
    details: list[ProblemDetail]


class ReadyAnswer(StrictModel):
    status: Literal["ready", "not ready"]
    reasons: list[str]


class ErrorAnswer(StrictModel):
    """Every refusal and failure: `error` is one line; 404 adds the `endpoints`, 409 what is `running`."""

    error: str
    endpoints: list[str] | None = None
    running: str | None = None


class PlanFile(StrictModel):
    """One segment of a plan or a pass: its action, the reasons keeping it, why it goes, each code explained."""

    segment: str
    base_offset: int
    bytes: int
    action: Literal["delete", "keep", "deleted", "hung", "failed"]
    reasons: list[str]
    live_bytes: int | None
    live_ratio: Number | None
    because: list[str] | None = None
    overridden: list[str] | None = None
    overridden_by: str | None = None
    details: dict[str, str]
    error: str | None = None
    removed_by: str | None = None


class PlanDisk(StrictModel):
    used_ratio: Number | None
    total_bytes: int | None
    free_bytes: int | None


class PlanLog(StrictModel):
    """One log of a plan or a pass (`disk` and the pass's own keys are absent for a log not planned)."""

    name: str
    path: str
    disk: PlanDisk | None = None
    triggers: list[str]
    files: list[PlanFile]
    deleted: int
    freed_bytes: int
    rolled: bool | None = None
    paced_seconds: Number | None = None
    unpaced: str | None = None
    not_examined: int | None = None
    stale_groups: list[str] | None = None
    pinned: list[PinnedFileView] | None = None
    pinned_bytes: int | None = None
    not_writable: str | None = None
    permission_denied: bool | None = None
    error: str | None = None
    not_created: bool | None = None
    note: str | None = None
    cache: dict[str, Any] | None = None
    owned_by: OwnedBy | None = None


class PlanAnswer(StrictModel):
    """`/plan` (`kind` plan) and `POST /clean` (`kind` pass, with `interrupted`)."""

    config: str
    at: str
    kind: Literal["plan", "pass"]
    logs: list[PlanLog]
    interrupted: bool | None = None


class CompactAnswer(CompactionResultView):
    """`POST /compact`: the pass (`dry_run`: what it would do) and the configuration it ran with."""

    config: str


class OffsetsLog(StrictModel):
    """A log's first offset at or after the time (null: nothing that late yet), or why it cannot say."""

    offset: int | None = None
    start_offset: int | None = None
    end_offset: int | None = None
    error: str | None = None


class OffsetsAnswer(StrictModel):
    config: str
    at: str
    timestamp_ms: int
    logs: dict[str, OffsetsLog]


class ClockAccepted(StrictModel):
    """`held`: whether a forward step was held (and is now accepted, with its figures)."""

    held: bool
    time: str
    trusted_time: str | None = None
    step_seconds: Number | None = None


class ClockAnswer(StrictModel):
    config: str
    clock: ClockAccepted
