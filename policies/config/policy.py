"""`policies:`, what a policy decides with: its schedule, reserve and batch limits, disk-pressure
thresholds (`disk:`), hung segments (`hung:`), compaction (`compaction:`) and its archive tier
(`archive:`, declared in `policies.config.archive`)."""

from __future__ import annotations

from zoneinfo import ZoneInfo

from pydantic import Field, field_validator, model_validator

from storesettings import REFUSE_WRITES_RATIO_DEFAULT

from policies.units import parse_ratio, parse_size
from policies.config.archive import ArchiveConfig
from policies.config.fields import (ByteSize, CleanRatio, Hours, NonNegativeDuration, PositiveDuration, Ratio,
                                    TimeZoneName, _DAY, _HOUR, _MIB, _MINUTE, _SECOND, _Strict,
                                    _config_problem)

DELETE_RATE_DEFAULT = 256 * _MIB   # bytes per second; chosen from bench/bench_delete_pacing.py


class DiskConfig(_Strict):
    """Disk-pressure thresholds of a policy, ratios of the filesystem as ``df`` shows it, and the rate
    its deletions free bytes at. Immutable."""

    clean_ratio: CleanRatio = Field(
        default=0.75,
        description="Above this used ratio expired segments are deleted at any hour. 0.10-0.95 "
        "(RocketMQ diskMaxUsedSpaceRatio). Accepts 0.75 or '75%'.",
    )
    force_ratio: Ratio = Field(
        default=0.85,
        description="Above this the oldest segments go even unexpired and unconsumed, when force is on. 0-1, "
        "at least clean_ratio (RocketMQ diskSpaceCleanForciblyRatio).",
    )
    refuse_writes_ratio: Ratio = Field(
        default=REFUSE_WRITES_RATIO_DEFAULT,
        description="Above this writers are refused until the ratio is back below force_ratio. 0-1, at least "
        "force_ratio (RocketMQ diskSpaceWarningLevelRatio).",
    )
    force: bool = Field(
        default=True,
        description="Whether disk pressure may delete unexpired and unconsumed data (RocketMQ "
        "cleanFileForciblyEnable); off, pressure deletes only expired segments no consumer group still "
        "needs, even above refuse_writes_ratio, where the writers are refused instead.",
    )
    force_target: CleanRatio | None = Field(
        default=None,
        description="Under force, a pass deletes down to this used ratio (a low-water mark, BookKeeper's "
        "diskUsageLwmThreshold), so a writer resuming below force_ratio does not take the disk straight "
        "back over it. 0.10-0.95, at most force_ratio; unset means clean_ratio.",
    )
    delete_rate: ByteSize | None = Field(
        default=DELETE_RATE_DEFAULT,
        description="Most bytes per second a pass frees by deleting segments: an integer or '256MiB' (per "
        "second, like compaction's max_bytes_per_second). Each deletion costs its bytes at this rate before "
        "the next one, and a file larger than a quarter second's bytes (1 to 64MiB) is truncated in such "
        "steps before its unlink, so the filesystem's writers do not meet a burst of freed blocks. Not "
        "applied over force_ratio or refuse_writes_ratio (the audit line's unpaced says so). Positive; "
        "null deletes at full speed; default 256MiB (docs/performance.md).",
    )

    @field_validator("delete_rate", mode="before")
    @classmethod
    def _check_delete_rate(cls, value: object) -> object:
        # 0 is not "off": say what is, instead of ByteSize's plain "must be positive".
        try:
            zero = value is not None and parse_size(value) == 0
        except ValueError:
            return value                   # ByteSize names the problem
        if zero:
            raise ValueError(f"must be positive (null deletes at full speed), got {value!r}")
        return value

    @property
    def force_target_ratio(self) -> float:
        """The used ratio a forced pass deletes down to: ``force_target``, or ``clean_ratio`` when unset."""
        return self.clean_ratio if self.force_target is None else self.force_target

    @model_validator(mode="after")
    def _check_order(self) -> DiskConfig:
        # Blame the key the operator wrote, so the line number points at something in the file.
        if self.clean_ratio > self.force_ratio:
            blamed = "force_ratio" if "force_ratio" in self.model_fields_set else "clean_ratio"
            raise _config_problem(
                f"must keep clean_ratio <= force_ratio, got clean_ratio {self.clean_ratio} > force_ratio {self.force_ratio}",
                blamed,
            )
        if self.force_ratio > self.refuse_writes_ratio:
            blamed = "refuse_writes_ratio" if "refuse_writes_ratio" in self.model_fields_set else "force_ratio"
            raise _config_problem(
                f"must keep force_ratio <= refuse_writes_ratio, got force_ratio {self.force_ratio} > "
                f"refuse_writes_ratio {self.refuse_writes_ratio}",
                blamed,
            )
        if self.force_target is not None and self.force_target > self.force_ratio:
            raise _config_problem(
                f"must keep force_target <= force_ratio, got force_target {self.force_target} > "
                f"force_ratio {self.force_ratio}",
                "force_target",
            )
        return self


class HungConfig(_Strict):
    """What happens to a segment a reader still holds when it is deleted. Immutable."""

    force_after: PositiveDuration = Field(
        default=120 * _SECOND,
        description="Seconds after the first attempt found it held that the segment is deleted regardless "
        "(RocketMQ destroyMapedFileIntervalForcibly). Positive; default 120s.",
    )
    retry_every: PositiveDuration = Field(
        default=120 * _SECOND,
        description="Seconds between delete attempts on a held segment (RocketMQ redeleteHangedFileInterval). "
        "Positive; default 120s.",
    )


class CompactionConfig(_Strict):
    """When and how dead records are reclaimed by rewriting segments (docs/concepts.md, "Compaction"). Immutable.

    ``policies.liveness`` decides which records are dead and ``policies.compaction`` which segments
    are rewritten; this model only holds the settings they read.
    """

    enabled: bool = Field(default=True, description="Whether compaction passes run for logs of this policy. Default true.")
    interval: PositiveDuration = Field(
        default=5 * _MINUTE, description="Seconds between compaction passes. Positive; default 5m."
    )
    max_live_ratio: Ratio = Field(
        default=0.5,
        description="A sealed segment is rewritten when its live bytes over its record bytes are below this "
        "(AMQ-3978's configurable percentage). Above 0, at most 1; default 0.5. Accepts 0.5 or '50%'.",
    )
    keys: bool = Field(
        default=False,
        description="Keyed log: a record is dead once a later record has its key, and a tombstone (empty value) "
        "once past tombstone_retention and consumed by every live group. Default false.",
    )
    tombstone_retention: NonNegativeDuration = Field(
        default=24 * _HOUR,
        description="Seconds a tombstone is kept after the compaction that first saw it (Kafka "
        "delete.retention.ms). 0 or more; default 24h.",
    )
    min_age: NonNegativeDuration = Field(
        default=0.0,
        description="Seconds after its last record's timestamp before a segment may be rewritten (Kafka "
        "min.compaction.lag.ms). 0 or more; default 0s.",
    )
    merge: bool = Field(
        default=True, description="Merge neighbouring rewritten segments while the result fits in segment_size. Default true."
    )
    max_bytes_per_second: ByteSize = Field(
        default=64 * _MIB,
        description="Throttle of a pass, counting bytes read plus bytes written: an integer or '64MiB'. "
        "Positive; default 64MiB.",
    )
    max_pass_duration: PositiveDuration = Field(
        default=60 * _SECOND,
        description="Seconds after which a pass stops between two output files. Positive; default 60s.",
    )

    @field_validator("max_live_ratio", mode="plain")
    @classmethod
    def _check_max_live_ratio(cls, value: object) -> float:
        # 0 would select nothing, not even fully dead segments; enabled: false is the one way to turn it off.
        ratio = parse_ratio(value)
        if ratio <= 0:
            raise ValueError(f"must be above 0 (use enabled: false to turn compaction off), got {value!r}")
        return ratio


class PolicyConfig(_Strict):
    """How and when the segments of the logs naming this policy are deleted. Immutable and hashable."""

    interval: PositiveDuration = Field(
        default=10 * _SECOND,
        description="Seconds between cleanup passes (RocketMQ cleanResourceInterval). Positive; default 10s.",
    )
    delete_at_hours: Hours = Field(
        default=(4,),
        description="Hours of the day (0-23) in which expired segments are deleted (RocketMQ deleteWhen). "
        "A list [4, 5], an integer, '04;05' or a range '00-23'; [] never (disk and manual triggers only). Default [4].",
    )
    timezone: TimeZoneName | None = Field(
        default=None,
        description="IANA time zone of delete_at_hours, e.g. 'Europe/Berlin'; null means the machine's local time.",
    )
    reserve: PositiveDuration = Field(
        default=72 * _HOUR,
        description="Seconds after its last write that a segment expires (RocketMQ fileReservedTime). "
        "Positive; default 72h.",
    )
    files_per_pass: int = Field(
        default=10,
        gt=0,
        description="Most segments deleted per log per pass (RocketMQ deleteFileBatchMax). Positive; default 10.",
    )
    retention_bytes: ByteSize | None = Field(
        default=None,
        description="Most bytes of segment files a log keeps (Kafka retention.bytes): while a log is larger, "
        "its oldest segments go at any hour and whatever their age, unconsumed data still protected and "
        "the segment being written kept. An integer or '2GiB'; positive; null (the default) caps nothing.",
    )
    roll_after: PositiveDuration | None = Field(
        default=None,
        description="Seconds after its first record at which the last segment of a log no writer has open is "
        "sealed by a pass, cut to its records (Kafka segment.ms), so a slow log's records expire and its "
        "preallocated tail goes back; a writer rolls its own with CommitLog.open(roll_after=). Positive; "
        "null (the default) rolls full segments only.",
    )
    pause_between_files: NonNegativeDuration = Field(
        default=0.1 * _SECOND,
        description="Seconds to pause between two deletions (RocketMQ deletePhysicFilesInterval). "
        "0 or more; default 100ms.",
    )
    manual_passes: int = Field(
        default=20,
        gt=0,
        description="Passes a manual trigger stays open for, ignoring the hour window. Positive; default 20.",
    )
    protect_unconsumed: bool = Field(
        default=True,
        description="Keep segments a consumer group has not consumed, unless the disk forces. Default true.",
    )
    consumer_ttl: PositiveDuration = Field(
        default=7 * _DAY,
        description="Seconds after its last commit that a consumer group stops protecting anything. "
        "Positive; default 7d.",
    )
    disk_check_interval: PositiveDuration = Field(
        default=1 * _SECOND,
        description="Seconds between disk usage checks, so pressure is acted on within this. Positive; default 1s.",
    )
    disk: DiskConfig = Field(default_factory=DiskConfig, description="Disk-pressure thresholds and the deletion rate.")
    hung: HungConfig = Field(default_factory=HungConfig, description="Handling of segments held by readers.")
    compaction: CompactionConfig = Field(
        default_factory=CompactionConfig, description="Reclaiming dead records by rewriting segments."
    )
    archive: ArchiveConfig = Field(
        default_factory=ArchiveConfig, description="Uploading sealed segments to an archive tier (object storage)."
    )

    @model_validator(mode="after")
    def _check_archive_reserve(self) -> PolicyConfig:
        # Local retention is a cache of the archive: the archive may not forget what the disk keeps.
        if self.archive.reserve is not None and self.archive.reserve < self.reserve:
            raise _config_problem(f"must be at least the policy's reserve ({self.reserve:g}s), got "
                                  f"{self.archive.reserve:g}s", "archive", "reserve")
        return self

    @property
    def zone(self) -> ZoneInfo | None:
        """The time zone of ``delete_at_hours``, or None for the machine's local time."""
        return None if self.timezone is None else ZoneInfo(self.timezone)


