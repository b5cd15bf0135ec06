"""The configuration's building blocks: the one-line `ConfigError`, the value types each setting is
declared with (durations, sizes, ratios, hours, names, paths; each parsed canonically, never
clamped) and the frozen, strict base model. Pure: thread-safe."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, BaseModel, ConfigDict, PlainSerializer, PlainValidator, ValidationInfo
from pydantic_core import PydanticCustomError

from policies.units import (describe_value, format_duration, format_size, parse_duration, parse_hours,
                            parse_ratio, parse_size)

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
        # One short line by contract, whatever a YAML parser, an OS error or the file put in it: a
        # part longer than its bound keeps its start and end around "...".
        self.source = _bounded(source, _SOURCE_CHARS)
        self.line = line
        self.key_path = _bounded(key_path, _KEY_PATH_CHARS)
        self.reason = _bounded(" ".join(reason.split()), _REASON_CHARS)
        super().__init__(self.reason)

    def __str__(self) -> str:
        place = self.source if self.line is None else f"{self.source}:{self.line}"
        return f"{place}: {self.key_path}: {self.reason}" if self.key_path else f"{place}: {self.reason}"


_PATH_MAX, _NAME_MAX = 4096, 255   # Linux's limits; beyond them every system call fails ENAMETOOLONG
_SOURCE_CHARS, _KEY_PATH_CHARS, _REASON_CHARS = 300, 200, 500


def _bounded(text: str, limit: int) -> str:
    if len(text) > limit:
        text = f"{text[:limit // 2]}...{text[-(limit // 2):]}"
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


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
NonNegativeByteSize = Annotated[int, PlainValidator(parse_size),
                                PlainSerializer(format_size, return_type=str)]
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
    if "\0" in value:
        raise ValueError("a path cannot contain a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("a path cannot contain a lone surrogate (\\ud800-\\udfff)") from None
    base = (info.context or {}).get("base_dir") or os.getcwd()
    path = os.path.abspath(os.path.join(os.fspath(base), os.path.expanduser(value)))
    longest = max(len(name.encode()) for name in path.split(os.sep))
    if len(path.encode()) >= _PATH_MAX or longest > _NAME_MAX:
        raise ValueError(f"a path is at most {_PATH_MAX - 1} bytes and each name in it {_NAME_MAX}, "
                         f"got {len(path)} characters, the longest name {longest} bytes")
    return Path(path)


def _directory_path(value: object, info: ValidationInfo, holds: str) -> Path:
    """``value`` resolved (`_resolve_path`), refused when it names an existing non-directory;
    ``holds`` ends the line ("a log is a directory")."""
    path = _resolve_path(value, info)
    if _probe(path, lambda: path.exists() and not path.is_dir()):
        raise ValueError(f"{path} exists and is not a directory; {holds}")
    return path


def _probe(path: Path, question: Callable[[], bool]) -> bool:
    """``question()`` about ``path``; a name the file system refuses (EACCES, a lone surrogate) is a ValueError."""
    try:
        return question()
    except (OSError, ValueError) as error:
        raise ValueError(f"{path} cannot be looked at: {getattr(error, 'strerror', None) or error}") from None


# --- the models ---------------------------------------------------------------------------------------


class _Strict(BaseModel):
    """Base of every configuration model: unknown keys and type coercion are errors, values frozen."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


