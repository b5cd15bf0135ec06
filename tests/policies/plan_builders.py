"""Builders of snapshots and policies for the planner tests, with a fixed clock."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timezone

from policies import (
    DiskSnapshot,
    GroupSnapshot,
    HungSegment,
    LogSnapshot,
    ManualTrigger,
    Plan,
    PolicyConfig,
    SegmentSnapshot,
    plan,
)

NOW = datetime(2026, 1, 10, 12, 0, tzinfo=timezone.utc)  # noon UTC: outside the default 04 window
NOW_TS = NOW.timestamp()
WINDOW_NOW = datetime(2026, 1, 10, 4, 30, tzinfo=timezone.utc)  # inside the default 04 window in UTC
HOUR = 3600.0
DAY = 24 * HOUR
SEGMENT_BYTES = 1000
RECORDS_PER_SEGMENT = 100


def policy(**overrides: object) -> PolicyConfig:
    """A policy in UTC, built from YAML-style values so the tests read like configuration."""
    return PolicyConfig.model_validate({"timezone": "UTC", **overrides})


def policies(**by_name: PolicyConfig) -> Mapping[str, PolicyConfig]:
    """Policies by name; ``default`` is the UTC default policy unless given."""
    return {"default": policy(), **by_name}


def plan_by_policy(logs: list[LogSnapshot], by_name: Mapping[str, PolicyConfig], now: datetime,
                   manual: Mapping[str, ManualTrigger] | None = None, *, trusted_now: datetime | None = None) -> Plan:
    """``plan`` with each log under the policy its snapshot names in ``by_name`` (no overrides); a log
    naming a policy ``by_name`` lacks has none in force."""
    in_force = {one.name: by_name[one.policy] for one in logs if one.policy in by_name}
    return plan(logs, in_force, now, manual or {}, trusted_now)


def segments(
    ages_hours: Iterable[float], *, directory: str = "/logs/staging", size: int = SEGMENT_BYTES, now: float = NOW_TS
) -> tuple[SegmentSnapshot, ...]:
    """Segments with the given ages (hours since last write), oldest first; the last is active."""
    ages = list(ages_hours)
    result = []
    for index, age in enumerate(ages):
        base = index * RECORDS_PER_SEGMENT
        result.append(
            SegmentSnapshot(
                base_offset=base,
                end_offset=base + RECORDS_PER_SEGMENT,
                path=f"{directory}/{base:020d}.log",
                size_bytes=size,
                mtime=now - age * HOUR,
                active=index == len(ages) - 1,
            )
        )
    return tuple(result)


def disk(used_ratio: float, *, capacity: int = 100_000, filesystem_id: int = 1) -> DiskSnapshot:
    used = round(capacity * used_ratio)
    return DiskSnapshot(filesystem_id=filesystem_id, total_bytes=capacity, used_bytes=used, free_bytes=capacity - used)


def group(name: str, committed: int, *, idle_hours: float = 0.0, at: datetime = NOW) -> GroupSnapshot:
    return GroupSnapshot(name=name, committed_offset=committed, last_commit_at=at.timestamp() - idle_hours * HOUR)


def hung(first_seconds_ago: float, last_seconds_ago: float, *, at: datetime = NOW) -> HungSegment:
    now = at.timestamp()
    return HungSegment(first_attempt_at=now - first_seconds_ago, last_attempt_at=now - last_seconds_ago)


def log(
    ages_hours: Iterable[float],
    *,
    name: str = "staging",
    used_ratio: float = 0.5,
    groups: Iterable[GroupSnapshot] = (),
    policy_name: str = "default",
    hung_segments: Mapping[int, HungSegment] | None = None,
    disk_snapshot: DiskSnapshot | None = None,
    segment_bytes: int = SEGMENT_BYTES,
    at: datetime = NOW,
) -> LogSnapshot:
    """A log named ``name`` whose segments have the given ages in hours at ``at``; the last is active."""
    directory = f"/logs/{name}"
    return LogSnapshot(
        name=name,
        path=directory,
        policy=policy_name,
        segments=segments(ages_hours, directory=directory, size=segment_bytes, now=at.timestamp()),
        groups=tuple(groups),
        disk=disk_snapshot if disk_snapshot is not None else disk(used_ratio),
        hung=hung_segments or {},
    )


def design_example_yaml() -> str:
    """The annotated configuration example the project started from, verbatim."""
    return """\
service:
  listen: 127.0.0.1:9464     # /healthz /readyz /metrics /status /plan, POST /clean
  log_level: INFO            # TRACE shows every per-segment decision
  log_format: text           # or json
  audit: data/audit.jsonl
logs:
  staging:                   # a name of your choice
    path: data/staging
    segment_size: 64MiB
    policy: default
policies:
  default:
    interval: 10s            # RocketMQ cleanResourceInterval
    delete_at_hours: [4]     # RocketMQ deleteWhen "04"; also "04;05"; [] never (disk and manual only)
    reserve: 72h             # RocketMQ fileReservedTime
    files_per_pass: 10       # RocketMQ deleteFileBatchMax
    pause_between_files: 100ms   # RocketMQ deletePhysicFilesInterval
    manual_passes: 20        # a manual trigger opens this many passes that ignore the hour window
    protect_unconsumed: true # keep what a consumer group has not consumed, unless the disk forces
    consumer_ttl: 7d         # a group silent this long no longer protects anything
    disk_check_interval: 1s  # pressure is acted on within this, not only every interval
    disk:
      clean_ratio: 0.75      # RocketMQ diskMaxUsedSpaceRatio (10 % to 95 %)
      force_ratio: 0.85      # RocketMQ diskSpaceCleanForciblyRatio
      refuse_writes_ratio: 0.90  # RocketMQ diskSpaceWarningLevelRatio
      force: true            # RocketMQ cleanFileForciblyEnable
      force_target: 0.75     # under force, delete down to this (BookKeeper's low-water mark)
    hung:
      force_after: 120s      # RocketMQ destroyMapedFileIntervalForcibly
      retry_every: 120s      # RocketMQ redeleteHangedFileInterval
"""


__all__ = [
    "DAY",
    "HOUR",
    "NOW",
    "NOW_TS",
    "RECORDS_PER_SEGMENT",
    "SEGMENT_BYTES",
    "WINDOW_NOW",
    "design_example_yaml",
    "disk",
    "group",
    "hung",
    "log",
    "policies",
    "policy",
    "segments",
]
