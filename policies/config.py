"""The retention configuration: models, validation and loading from YAML.

Every setting is declared once below with its type, unit, default, range and meaning. Values are
stored canonically: durations as ``float`` seconds, sizes as ``int`` bytes, ratios as ``float`` in
0-1, paths as absolute ``Path``. Invalid input is rejected, never clamped; loading from YAML and the
one-line ``FILE:LINE: KEY.PATH: reason`` errors (:class:`ConfigError`) live in :mod:`policies.loading`.

All models are frozen (their mappings are read-only views), so a loaded configuration is immutable
and safe to share between threads.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    ValidationInfo,
    WrapSerializer,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from storesettings import REFUSE_WRITES_RATIO_DEFAULT, SEGMENT_SIZE_DEFAULT, SEGMENT_SIZE_MAX, SEGMENT_SIZE_MIN

from policies.units import (
    describe_value,
    format_duration,
    format_size,
    parse_duration,
    parse_hours,
    parse_ratio,
    parse_size,
)

__all__ = [
    "DEFAULT_POLICY",
    "LOG_LEVELS",
    "CompactionConfig",
    "ConfigError",
    "DiskConfig",
    "HungConfig",
    "LogConfig",
    "PolicyConfig",
    "RetentionConfig",
    "ServiceConfig",
]

DEFAULT_POLICY = "default"
LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "SUCCESS", "WARNING", "ERROR", "CRITICAL")

_SECOND = 1.0
_MINUTE = 60 * _SECOND
_HOUR = 60 * _MINUTE
_DAY = 24 * _HOUR
_MIB = 2**20

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


class ConfigError(ValueError):
    """A configuration that cannot be used; ``str()`` is one line, ``FILE:LINE: KEY.PATH: reason``.

    ``line`` is None when the problem has no place in the file (an empty or unreadable file) and
    ``key_path`` is empty when it concerns no key (a YAML syntax error). Immutable once raised.
    """

    def __init__(self, reason: str, *, source: str = "<string>", line: int | None = None, key_path: str = "") -> None:
        self.source = source
        self.line = line
        self.key_path = key_path
        # The message is a single line by contract, whatever a YAML parser or OS error put in it.
        self.reason = " ".join(reason.split())
        super().__init__(self.reason)

    def __str__(self) -> str:
        place = self.source if self.line is None else f"{self.source}:{self.line}"
        return f"{place}: {self.key_path}: {self.reason}" if self.key_path else f"{place}: {self.reason}"


def _config_problem(reason: str, *key: str) -> PydanticCustomError:
    """An error from a whole-model check; ``key`` is the path, inside that model, of the key to blame."""
    return PydanticCustomError("config", "{reason}", {"reason": reason, "key": key})


# --- value types: each pairs a strict parser with a serializer that writes the YAML form back ---------


def _positive_duration(value: object) -> float:
    seconds = parse_duration(value)
    if seconds <= 0:
        raise ValueError(f"must be positive, got {value!r}")
    return seconds


def _non_negative_duration(value: object) -> float:
    seconds = parse_duration(value)
    if seconds < 0:
        raise ValueError(f"must not be negative, got {value!r}")
    return seconds


def _positive_size(value: object) -> int:
    size = parse_size(value)
    if size <= 0:
        raise ValueError(f"must be positive, got {value!r}")
    return size


def _clean_ratio(value: object) -> float:
    ratio = parse_ratio(value)
    # RocketMQ's diskMaxUsedSpaceRatio takes effect only within 10-95 %.
    if not 0.10 <= ratio <= 0.95:
        raise ValueError(f"must be between 0.10 and 0.95 (10% to 95%), got {value!r}")
    return ratio


def _name(value: str) -> str:
    if not _NAME.fullmatch(value):
        raise ValueError(f"a name must be letters, digits, '_', '.' or '-' and start with a letter or digit, got {value!r}")
    return value


def _time_zone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(f"unknown time zone {value!r}; use an IANA name such as 'Europe/Berlin' or 'UTC'") from None
    return value


def _frozen_mapping(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping))


_DURATION_SERIALIZER = PlainSerializer(format_duration, return_type=str)
PositiveDuration = Annotated[float, PlainValidator(_positive_duration), _DURATION_SERIALIZER]
NonNegativeDuration = Annotated[float, PlainValidator(_non_negative_duration), _DURATION_SERIALIZER]
ByteSize = Annotated[int, PlainValidator(_positive_size), PlainSerializer(format_size, return_type=str)]
Ratio = Annotated[float, PlainValidator(parse_ratio)]
CleanRatio = Annotated[float, PlainValidator(_clean_ratio)]
Hours = Annotated[tuple[int, ...], PlainValidator(parse_hours), PlainSerializer(list, return_type=list[int])]
Name = Annotated[str, AfterValidator(_name)]
TimeZoneName = Annotated[str, AfterValidator(_time_zone)]


def _resolve_path(value: object, info: ValidationInfo) -> Path:
    """Make ``value`` absolute against the ``base_dir`` of the validation context (default: cwd)."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise ValueError(f"expected a path, got {describe_value(value)}")
    if not value.strip():
        raise ValueError("must not be empty")
    base = (info.context or {}).get("base_dir") or os.getcwd()
    return Path(os.path.abspath(os.path.join(os.fspath(base), os.path.expanduser(value))))


# --- the models ---------------------------------------------------------------------------------------


class _Strict(BaseModel):
    """Base of every configuration model: unknown keys and type coercion are errors, values frozen."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ServiceConfig(_Strict):
    """The sidecar process: HTTP endpoint, logging and audit trail. Immutable."""

    listen: str = Field(
        default="127.0.0.1:9464",
        description="HOST:PORT of the HTTP server (/healthz /readyz /metrics /status /plan, POST /clean); "
        "an IPv6 host goes in brackets, [::1]:9464. Default loopback only.",
    )
    log_level: str = Field(
        default="INFO",
        description="One of TRACE DEBUG INFO SUCCESS WARNING ERROR CRITICAL (any case); TRACE shows every "
        "per-segment decision.",
    )
    log_format: Literal["text", "json"] = Field(default="text", description="Log line format: text or json.")
    audit: Path = Field(
        default=Path("data/audit.jsonl"),
        validate_default=True,
        description="File the audit trail appends one JSON line per deletion to; relative to the base directory.",
    )
    token: str | None = Field(
        default=None,
        description="Shared secret POST /clean requires; mandatory when listen is not a loopback address.",
    )

    http_timeout: PositiveDuration = Field(
        default=10 * _SECOND,
        description="Seconds an HTTP connection may stay idle, or take to send one request, before the "
        "sidecar closes it (slow or stalled clients cannot hold a connection). 1s to 1h; default 10s. "
        "A reload applies it to every open connection at once.",
    )
    max_connections: int = Field(
        default=500,
        ge=1,
        le=10_000,
        description="Most HTTP connections open at once (idle ones included; they cost no thread); "
        "beyond it new connections wait in the listen backlog until one closes. 1 to 10000; default 500. "
        "A reload applies it to the next connection accepted.",
    )

    failed_passes_unhealthy: int = Field(
        default=3,
        ge=1,
        le=1000,
        description="How many passes in a row must fail (or find the log unreadable) before a log makes "
        "/healthz answer 503 (problem passes-failing). 1 to 1000; default 3. A reload applies it.",
    )

    watch_rolls: bool = Field(
        default=True,
        description="Check a log's disk the moment a writer prepares or rolls a segment in it (Linux "
        "inotify), so pressure is acted on within milliseconds; off (or without inotify), at the next "
        "disk check. A reload applies it.",
    )

    @field_validator("http_timeout")
    @classmethod
    def _check_http_timeout(cls, value: float) -> float:
        if not 1 * _SECOND <= value <= _HOUR:
            raise ValueError(f"must be between 1s and 1h, got {format_duration(value)}")
        return value

    @field_validator("listen")
    @classmethod
    def _check_listen(cls, value: str) -> str:
        _split_listen(value)
        return value

    @field_validator("log_level", mode="plain")
    @classmethod
    def _check_log_level(cls, value: object) -> str:
        if not isinstance(value, str) or value.upper() not in LOG_LEVELS:
            raise ValueError(f"expected one of {', '.join(LOG_LEVELS)}, got {describe_value(value)}")
        return value.upper()

    @field_validator("audit", mode="plain")
    @classmethod
    def _check_audit(cls, value: object, info: ValidationInfo) -> Path:
        path = _resolve_path(value, info)
        if path.is_dir():
            raise ValueError(f"{path} is a directory; the audit trail is a file")
        return path

    @field_validator("token")
    @classmethod
    def _check_token(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be empty; leave the key out for no token")
        return value

    @model_validator(mode="after")
    def _require_token_beyond_loopback(self) -> ServiceConfig:
        if not self.is_loopback and self.token is None:
            raise _config_problem(
                f"{self.listen} is not a loopback address, so service.token is required (it guards POST /clean)",
                "listen",
            )
        return self

    @property
    def host(self) -> str:
        """The listen host without IPv6 brackets."""
        return _split_listen(self.listen)[0]

    @property
    def port(self) -> int:
        return _split_listen(self.listen)[1]

    @property
    def is_loopback(self) -> bool:
        """True when the server is reachable from this machine only (localhost, 127.0.0.0/8, ::1)."""
        host = self.host
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:  # a host name other than localhost may resolve anywhere
            return False


def _split_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"expected HOST:PORT such as 127.0.0.1:9464, got {listen!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"an IPv6 host goes in brackets, e.g. [::1]:9464, got {listen!r}")
    if not 0 <= int(port) <= 65535:
        raise ValueError(f"port {port} is outside 0-65535")
    return host, int(port)


class DiskConfig(_Strict):
    """Disk-pressure thresholds of a policy; ratios are of the filesystem as ``df`` shows it. Immutable."""

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
        "cleanFileForciblyEnable); off, pressure deletes only expired segments.",
    )
    force_target: CleanRatio | None = Field(
        default=None,
        description="Under force, a pass deletes down to this used ratio (a low-water mark, BookKeeper's "
        "diskUsageLwmThreshold), so a writer resuming below force_ratio does not take the disk straight "
        "back over it. 0.10-0.95, at most force_ratio; unset means clean_ratio.",
    )

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
    """When and how dead records are reclaimed by rewriting segments (README "Compaction (operations)"). Immutable.

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
        "A list [4, 5], an integer or '04;05'; [] never (disk and manual triggers only). Default [4].",
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
    disk: DiskConfig = Field(default_factory=DiskConfig, description="Disk-pressure thresholds.")
    hung: HungConfig = Field(default_factory=HungConfig, description="Handling of segments held by readers.")
    compaction: CompactionConfig = Field(
        default_factory=CompactionConfig, description="Reclaiming dead records by rewriting segments."
    )

    @property
    def zone(self) -> ZoneInfo | None:
        """The time zone of ``delete_at_hours``, or None for the machine's local time."""
        return None if self.timezone is None else ZoneInfo(self.timezone)


class LogConfig(_Strict):
    """One commit log the scheduler looks after. Immutable."""

    path: Path = Field(
        description="Directory of the log; relative to the base directory. Required; must not be an existing "
        "file, and two logs may not share it."
    )
    segment_size: ByteSize = Field(
        default=SEGMENT_SIZE_DEFAULT,
        description="Bytes of each preallocated segment file: an integer or '64MiB' (B, KiB, MiB, GiB). "
        "From 4KiB to 4GiB - 1 B (the store's limits, storesettings); default 64MiB.",
    )
    policy: Name = Field(default=DEFAULT_POLICY, description="Name of the policy in policies; default 'default'.")

    @field_validator("segment_size", mode="after")
    @classmethod
    def _check_segment_size(cls, value: int) -> int:
        if not SEGMENT_SIZE_MIN <= value <= SEGMENT_SIZE_MAX:
            bound = (f"at least {format_size(SEGMENT_SIZE_MIN)}" if value < SEGMENT_SIZE_MIN
                     else f"at most {format_size(SEGMENT_SIZE_MAX)}")
            raise ValueError(f"must be {bound} (the store's limit), got {value} bytes")
        return value

    @field_validator("path", mode="plain")
    @classmethod
    def _check_path(cls, value: object, info: ValidationInfo) -> Path:
        path = _resolve_path(value, info)
        if path.exists() and not path.is_dir():
            raise ValueError(f"{path} exists and is not a directory; a log is a directory")
        return path


Logs = Annotated[
    Mapping[Name, LogConfig], AfterValidator(_frozen_mapping), WrapSerializer(lambda value, handler: handler(dict(value)))
]
Policies = Annotated[
    Mapping[Name, PolicyConfig],
    AfterValidator(_frozen_mapping),
    WrapSerializer(lambda value, handler: handler(dict(value))),
]


@functools.cache
def _implicit_default_policy() -> PolicyConfig:
    """The one ``default`` policy added to a file without its own (told apart by identity)."""
    return PolicyConfig()


class RetentionConfig(_Strict):
    """The whole configuration file. Immutable; ``logs`` and ``policies`` are read-only mappings.

    A policy named ``default`` with every default value exists unless the file defines its own, so a
    file without a ``policies`` section works.
    """

    service: ServiceConfig = Field(
        default_factory=dict, validate_default=True, description="The sidecar process settings."
    )
    logs: Logs = Field(default_factory=dict, validate_default=True, description="Log name -> log settings.")
    policies: Policies = Field(
        default_factory=dict, validate_default=True, description="Policy name -> policy; 'default' always exists."
    )

    @field_validator("policies", mode="after")
    @classmethod
    def _add_default_policy(cls, policies: Mapping[str, PolicyConfig]) -> Mapping[str, PolicyConfig]:
        if DEFAULT_POLICY in policies:
            return policies
        return MappingProxyType({DEFAULT_POLICY: _implicit_default_policy(), **policies})

    @model_validator(mode="after")
    def _check_logs(self) -> RetentionConfig:
        seen: dict[str, str] = {}
        for name, log in self.logs.items():
            if log.policy not in self.policies:
                defined = ", ".join(sorted(self.policies))
                raise _config_problem(f"undefined policy {log.policy!r}; defined: {defined}", "logs", name, "policy")
            # realpath also catches two spellings (or a symlink) of one directory.
            real = os.path.realpath(log.path)
            if real in seen:
                raise _config_problem(f"is already the path of log {seen[real]!r} ({log.path})", "logs", name, "path")
            seen[real] = name
        return self

    @property
    def defined_policies(self) -> tuple[str, ...]:
        """The names of the policies the file defines (``policies`` less an implicit ``default``)."""
        return tuple(name for name, policy in self.policies.items() if policy is not _implicit_default_policy())

    def policy_for(self, log_name: str) -> PolicyConfig:
        """Return the policy of the log named ``log_name`` (KeyError if there is no such log)."""
        return self.policies[self.logs[log_name].policy]
