"""The `/status` answer as pydantic models: what the sidecar serves, the status page reads and
`retention status` prints, declared once (the OpenAPI document at `/openapi.json` is generated from
them, retention/web/openapi.py).

Every model forbids keys it does not declare (`additionalProperties: false` in the schema), so a
field added on one side only fails when the status is built. A key that is absent in some answers
(a failed pass's `rolled`, a problem's `since`) has a default and is left out when not set: dump
with `Status.to_json()`. Immutable plain data: thread-safe.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, WithJsonSchema

__all__ = ["ArchiveStatus", "BudgetLogView", "BudgetView", "ClockHeld", "ClusterStatus", "CompactionLast", "CompactionLogLast",
           "CompactionLogResult", "CompactionOutputView", "CompactionResultView", "CompactionRunning",
           "CompactionStatus", "ConsumerGroup", "FilesystemView", "HealthView", "HungSegment", "Job", "LastPass",
           "LogDisk", "LogStatus", "Number", "OwnedBy", "PinnedFileView", "PolicyFields", "PolicyView",
           "ProblemDetail", "Status", "StrictModel"]

# An int stays an int and a float a float (pydantic's `float` would turn 3600 into 3600.0).
Number = Annotated[int | float, WithJsonSchema({"type": "number"})]


class StrictModel(BaseModel):
    """A model of a served JSON object: no undeclared key, frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def to_json(self) -> dict:
        """The JSON object served (keys absent from the input stay absent)."""
        return self.model_dump(mode="json", exclude_unset=True)


class PolicyFields(StrictModel):
    """A policy's settings as `/status` shows them (the configuration's own names with their units)."""

    interval_seconds: Number
    delete_at_hours: list[int]
    timezone: str | None
    reserve_seconds: Number
    retention_bytes: int | None
    roll_after_seconds: Number | None
    files_per_pass: int
    pause_between_files_seconds: Number
    disk_check_interval_seconds: Number
    clean_ratio: Number
    force_ratio: Number
    refuse_writes_ratio: Number
    force: bool
    protect_unconsumed: bool
    hung_force_after_seconds: Number
    hung_retry_every_seconds: Number


class PolicyView(PolicyFields):
    logs: list[str]


class FilesystemView(StrictModel):
    mountpoint: str
    logs: list[str]
    used_ratio: Number | None
    total_bytes: int | None
    free_bytes: int | None
    pressure: str
    forcing: bool
    checked_at: str | None
    pressure_pass_running: bool


class LogDisk(StrictModel):
    """The filesystem of a log (all null before the first disk check found it)."""

    mountpoint: str | None
    used_ratio: Number | None
    total_bytes: int | None
    free_bytes: int | None
    pressure: str | None


class HungSegment(StrictModel):
    segment: str
    base_offset: int
    first_attempt_at: str | None
    last_attempt_at: str | None
    held_seconds: Number


class PinnedFileView(StrictModel):
    pid: int
    command: str
    path: str
    bytes: int
    how: str


class ConsumerGroup(StrictModel):
    group: str
    committed_offset: int
    lag_records: int
    lag_bytes: int
    last_commit_at: str | None
    stale: bool
    behind_start: bool


class OwnedBy(StrictModel):
    pid: int | None


class LastPass(StrictModel):
    """A log's last pass (`rolled` is absent when the pass raised before planning)."""

    at: str
    finished_at: str | None
    kind: str
    deleted: int
    freed_bytes: int
    outcome: str
    rolled: bool = False
    error: str | None
    duration_seconds: Number
    last_success_at: str | None


class LogStatus(StrictModel):
    """One configured log: its settings, its disk, what its last pass saw, that pass."""

    name: str
    path: str
    policy: str
    interval_seconds: Number
    retention_bytes: int | None
    overrides: dict[str, Any]
    policy_in_force: PolicyFields | None
    disk: LogDisk
    exists: bool
    segments: int | None
    bytes: int | None
    start_offset: int | None
    end_offset: int | None
    triggers: list[str]
    hung: list[HungSegment]
    pinned: list[PinnedFileView]
    pinned_bytes: int
    consumer_groups: list[ConsumerGroup]
    stale_groups: list[str]
    error: str | None
    as_of: str | None
    dead_bytes: int | None
    owned_by: OwnedBy | None
    manual_passes_left: int
    last_pass: LastPass | None


class Job(StrictModel):
    id: str
    interval_seconds: Number | None
    next_run_time: str | None
    misfire_grace_time: Number | None


class ProblemDetail(StrictModel):
    """An active health problem (`since`: when it started, in `/status` only)."""

    problem: str
    log: str | None
    message: str
    severity: Literal["critical", "warning"]
    since: str | None = None


class HealthView(StrictModel):
    problems: list[ProblemDetail]
    reload_error: str | None
    not_ready: list[str]


class ClockHeld(StrictModel):
    """A forward step of the wall clock, held until accepted."""

    step_seconds: Number
    trusted_time: str
    time: str
    detected: str
    detected_at: str


class CompactionOutputView(StrictModel):
    segment: str | None
    inputs: list[str]
    bytes_before: int
    bytes_after: int
    dropped: dict[str, int]


class CompactionLogResult(StrictModel):
    name: str
    path: str
    outputs: list[CompactionOutputView]
    reclaimed_bytes: int
    planned: int
    error: str | None


class CompactionResultView(StrictModel):
    """A compaction pass (`retention compact --json`)."""

    at: str
    dry_run: bool
    interrupted: bool
    duration_seconds: Number
    logs: list[CompactionLogResult]


class CompactionLast(StrictModel):
    """The last compaction pass that did or tried something, and where."""

    kind: str
    mountpoint: str
    outputs: int
    reclaimed_bytes: int
    at: str
    dry_run: bool
    interrupted: bool
    duration_seconds: Number
    logs: list[CompactionLogResult]


class CompactionLogLast(StrictModel):
    at: str
    kind: str
    outputs: int
    reclaimed_bytes: int
    error: str | None


class CompactionRunning(StrictModel):
    """A compaction running now; the output being written, once it has one."""

    mountpoint: str
    kind: str
    seconds: Number
    log: str | None = None
    outputs_done: int | None = None
    outputs_planned: int | None = None
    bytes_moved: int | None = None
    started_at: str | None = None


class CompactionStatus(StrictModel):
    running: list[CompactionRunning]
    last: CompactionLast | None
    logs: dict[str, CompactionLogLast]


class ArchiveStatus(StrictModel):
    """A log's archive tier: what its manifest lists, the upload lag, the last trouble."""

    url: str
    lag_seconds: Number
    lag_bytes: int
    missing: str | None                  # why the tier is not trusted; null when it is
    archived_segments: int
    archived_bytes: int
    failures: int
    last_error: str | None
    last_success_at: str | None
    owned_elsewhere: str | None          # why another host uploads this log; null when none does


class ClusterStatus(StrictModel):
    """A cluster log's tier lease and what this sidecar's runs on it did."""

    owner: str | None
    until: str | None
    mine: bool
    lease_error: str | None
    last_error: str | None
    last_run_at: str | None
    dropped_segments: int
    deleted_objects: int
    deleted_bytes: int


class BudgetLogView(StrictModel):
    """One log of a shared byte budget: its part and its size after its last pass (null before one)."""

    name: str
    weight: Number
    floor_bytes: int
    share_bytes: int
    bytes: int | None


class BudgetView(StrictModel):
    """A shared byte budget: its bytes, what its logs take together (null until each was seen) and
    whether that is over."""

    bytes: int
    used_bytes: int | None
    over: bool
    logs: list[BudgetLogView]


class Status(StrictModel):
    """The `/status` answer."""

    service: Literal["retention"]
    pid: int
    healthy: bool
    problems: list[str]
    ready: bool
    config_loaded_at: str | None
    uptime_seconds: Number
    interval_seconds: Number | None
    policies: dict[str, PolicyView]
    filesystems: list[FilesystemView]
    logs: list[LogStatus]
    jobs: list[Job]
    audit: str
    lag_note: str
    warnings: list[str]
    config: str
    clock: ClockHeld | None
    compaction: CompactionStatus
    archive: dict[str, ArchiveStatus]
    cluster: dict[str, ClusterStatus]
    budgets: dict[str, BudgetView]
    health: HealthView

    def next_run(self, job_id: str) -> str | None:
        """When the job `job_id` runs next (ISO 8601), None when it is not scheduled."""
        return next((job.next_run_time for job in self.jobs if job.id == job_id), None)
