"""Parsing and formatting of the configuration's units: durations, sizes, ratios and hours.

Every parser takes the raw value as YAML produced it and either returns the canonical value or raises
``ValueError`` whose message is a short reason fit for ``FILE:LINE: KEY: reason``. The functions are
pure and thread-safe.

Canonical forms:

- a duration is ``float`` seconds, written with a unit: ``"100ms"``, ``"10s"``, ``"1.5m"``, ``"72h"``,
  ``"7d"``. A bare number is rejected: ``10`` could mean seconds or milliseconds, and RocketMQ uses both.
- a size is ``int`` bytes, written as a plain integer of bytes or with a binary unit: ``"64MiB"``.
- a ratio is ``float`` in ``[0, 1]``, written as ``0.75`` or ``"75%"``.
- hours of the day are a sorted ``tuple[int, ...]`` of distinct values in 0-23, written as a list
  ``[4, 5]``, a single integer ``4`` or RocketMQ's ``deleteWhen`` string ``"04;05"``.
"""

from __future__ import annotations

import math
import re
import reprlib
from collections.abc import Iterable
from datetime import timedelta
from decimal import Decimal, InvalidOperation

__all__ = [
    "DURATION_UNITS",
    "MAX_DURATION_SECONDS",
    "SIZE_UNITS",
    "describe_kind",
    "describe_value",
    "format_duration",
    "format_hours",
    "format_size",
    "humanize_duration",
    "humanize_size",
    "parse_duration",
    "parse_hours",
    "parse_ratio",
    "parse_size",
    "plural",
    "shown",
]

DURATION_UNITS: dict[str, float] = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
SIZE_UNITS: dict[str, int] = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}

# A hundred years: beyond it a duration overflows datetime arithmetic long before it means anything.
MAX_DURATION_SECONDS = 36500 * 86400.0

_NUMBER_WITH_UNIT = re.compile(r"(?P<number>[+-]?\d+(?:\.\d+)?)\s*(?P<unit>[A-Za-z%]*)")
_HOUR_TOKEN = re.compile(r"(\d{1,2})(?:-(\d{1,2}))?")   # an hour, or a range of them: 09-17


_KINDS = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list", dict: "a mapping"}


def describe_kind(value: object) -> str:
    """Return the kind of a YAML value in words: ``a string``, ``a list``, ``null``."""
    if value is None:
        return "null"
    return next((name for cls, name in _KINDS.items() if type(value) is cls), type(value).__name__)


def describe_value(value: object) -> str:
    """Return ``value`` as the operator wrote it plus its kind, e.g. ``'ten' (a string)``; a long string
    or a large list is shortened (``...``), so a message stays short whatever the value."""
    if value is None:
        return "nothing (null)"
    return f"{shown(value)} ({describe_kind(value)})"


def _short_repr() -> reprlib.Repr:
    # reprlib never builds the whole repr, so a value made of a million aliased lists costs nothing here.
    shortener = reprlib.Repr()
    shortener.maxstring = shortener.maxother = shortener.maxlong = 60
    shortener.maxlevel, shortener.maxlist, shortener.maxdict = 2, 4, 4
    return shortener


_SHORT_REPR = _short_repr()


def shown(value: object) -> str:
    """``repr(value)`` shortened to about 60 characters per string and a few items per collection."""
    return _SHORT_REPR.repr(value)


def parse_duration(value: object) -> float:
    """Return the duration ``value`` in seconds; it may be negative (the caller decides the range).

    Accepts a string ``NUMBER UNIT`` with a unit of ``ms s m h d`` (decimals allowed, ``"1.5s"``) or a
    ``timedelta``. Rejects bare numbers and booleans.
    """
    if isinstance(value, timedelta):
        return _check_duration_magnitude(value.total_seconds(), value)
    if isinstance(value, bool) or isinstance(value, (int, float)):
        raise ValueError(f"a duration needs a unit (ms, s, m, h, d), e.g. '10s' or '100ms', got {describe_value(value)}")
    if not isinstance(value, str):
        raise ValueError(f"expected a duration such as '10s' or '72h', got {describe_value(value)}")
    match = _NUMBER_WITH_UNIT.fullmatch(value.strip())
    if match is None:
        raise ValueError(f"expected a duration such as '10s', '100ms' or '72h', got {value!r}")
    unit = match["unit"]
    if unit not in DURATION_UNITS:
        if not unit:
            raise ValueError(f"a duration needs a unit (ms, s, m, h, d), e.g. '10s', got {value!r}")
        raise ValueError(f"unknown duration unit {unit!r} in {value!r}; use ms, s, m, h or d")
    return _check_duration_magnitude(float(match["number"]) * DURATION_UNITS[unit], value)


def _check_duration_magnitude(seconds: float, value: object) -> float:
    if abs(seconds) > MAX_DURATION_SECONDS:
        raise ValueError(f"must not be longer than 36500d, got {value!r}")
    return seconds


def parse_size(value: object) -> int:
    """Return the size ``value`` in bytes (never negative).

    Accepts a non-negative integer of bytes or a string ``NUMBER UNIT`` with a unit of ``B KiB MiB
    GiB``; a decimal number is allowed when it makes a whole number of bytes (``"1.5KiB"``).
    """
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"expected a size such as '64MiB' or a number of bytes, got {describe_value(value)}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"must not be negative, got {value}")
        return value
    match = _NUMBER_WITH_UNIT.fullmatch(value.strip())
    if match is None:
        raise ValueError(f"expected a size such as '64MiB', '1GiB' or a number of bytes, got {value!r}")
    unit = match["unit"] or "B"
    if unit not in SIZE_UNITS:
        raise ValueError(f"unknown size unit {unit!r} in {value!r}; use B, KiB, MiB or GiB")
    try:
        exact = Decimal(match["number"]) * SIZE_UNITS[unit]
    except InvalidOperation as error:  # the regex admits only plain decimals; this guards the invariant
        raise ValueError(f"expected a size such as '64MiB', got {value!r}") from error
    if exact < 0:
        raise ValueError(f"must not be negative, got {value!r}")
    if exact != exact.to_integral_value():
        raise ValueError(f"must be a whole number of bytes, got {value!r}")
    return int(exact)


def parse_ratio(value: object) -> float:
    """Return the ratio ``value`` as a float in ``[0, 1]``.

    Accepts a number (``0.75``, also the integers 0 and 1) or a percentage string (``"75%"``).
    Rejects booleans, strings without ``%`` and anything outside 0-1 (0 %-100 %).
    """
    if isinstance(value, bool):
        raise ValueError(f"expected a ratio such as 0.75 or '75%', got {describe_value(value)}")
    if isinstance(value, (int, float)):
        ratio = float(value)
        shown = repr(value)
    elif isinstance(value, str):
        match = _NUMBER_WITH_UNIT.fullmatch(value.strip())
        if match is None or match["unit"] != "%":
            raise ValueError(f"expected a ratio such as 0.75 or '75%', got {value!r}")
        ratio = float(match["number"]) / 100.0
        shown = value.strip()
    else:
        raise ValueError(f"expected a ratio such as 0.75 or '75%', got {describe_value(value)}")
    # Written as "not within" so that NaN, which compares false with everything, is rejected too.
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"must be between 0 and 1, got {shown}")
    return ratio


def parse_hours(value: object) -> tuple[int, ...]:
    """Return the hours of the day in ``value`` as a sorted tuple of distinct integers in 0-23.

    Accepts a list of integers (``[4, 5]``; ``[]`` means no hour), a single integer (``4``) or
    RocketMQ's ``deleteWhen`` string of ``;``-separated hours (``"04;05"``), where an item may be an
    inclusive range (``"00-23"`` every hour, ``"22-23;00-05"`` nights).
    """
    if isinstance(value, bool):
        raise ValueError(f"expected hours such as [4, 5] or '04;05', got {describe_value(value)}")
    if isinstance(value, int):
        return _checked_hours([value])
    if isinstance(value, str):
        tokens = [token.strip() for token in value.split(";")]
        if not value.strip():
            raise ValueError("is an empty string; write [] for no delete hour")
        hours: list[int] = []
        for token in tokens:
            found = _HOUR_TOKEN.fullmatch(token)
            if not found:
                raise ValueError(f"expected hours separated by ';' such as '04;05' or '09-17', got {value!r}")
            first, last = int(found.group(1)), int(found.group(2) or found.group(1))
            if last < first:
                raise ValueError(f"the range {token!r} ends before it starts; write '22-23;00-05' across midnight")
            hours.extend(range(first, last + 1))
        return _checked_hours(hours)
    if isinstance(value, (list, tuple)):
        for item in value:
            if isinstance(item, bool) or not isinstance(item, int):
                raise ValueError(f"each hour must be an integer 0-23, got {describe_value(item)}")
        return _checked_hours(value)
    raise ValueError(f"expected hours such as [4, 5] or '04;05', got {describe_value(value)}")


def _checked_hours(hours: Iterable[int]) -> tuple[int, ...]:
    checked = set()
    for hour in hours:
        if not 0 <= hour <= 23:
            raise ValueError(f"hour {hour} is outside 0-23")
        checked.add(hour)
    return tuple(sorted(checked))


def format_hours(hours: Iterable[int]) -> str:
    """Sorted hours as runs, the inverse of :func:`parse_hours`'s string form: ``"00-23"``,
    ``"04"``, ``"09-11;22"``; ``""`` for no hour."""
    runs: list[list[int]] = []
    for hour in sorted(set(hours)):
        if runs and hour == runs[-1][1] + 1:
            runs[-1][1] = hour
        else:
            runs.append([hour, hour])
    return ";".join(f"{a:02d}" if a == b else f"{a:02d}-{b:02d}" for a, b in runs)


def format_duration(seconds: float) -> str:
    """Return ``seconds`` as an exact duration string that :func:`parse_duration` reads back.

    Uses the largest unit that gives a whole number (``259200`` -> ``"3d"``, ``0.1`` -> ``"100ms"``),
    falling back to fractional milliseconds.
    """
    for unit in ("d", "h", "m", "s", "ms"):
        count = seconds / DURATION_UNITS[unit]
        if count == int(count) and (count != 0 or unit == "s"):
            return f"{int(count)}{unit}"
    return f"{format(Decimal(repr(seconds)), 'f')}s"


def humanize_duration(seconds: float) -> str:
    """Return ``seconds`` rounded to its two largest units for people: ``"3h12m"``, ``"4d2h"``, ``"100ms"``."""
    sign = "-" if seconds < 0 else ""
    remaining = abs(seconds)
    if remaining < 1:
        return f"{sign}{round(remaining * 1000)}ms"
    whole = math.floor(remaining)
    parts = []
    for unit in ("d", "h", "m", "s"):
        size = int(DURATION_UNITS[unit])
        count, whole = divmod(whole, size)
        if count or parts:
            parts.append((count, unit))
    shown = [f"{count}{unit}" for count, unit in parts[:2] if count]
    return sign + "".join(shown)


def plural(count: int, one: str, many: str | None = None) -> str:
    """``count`` with the noun its number takes: ``"1 segment"``, ``"2 segments"``, ``"0 log
    directories"`` (``many`` when adding an s is not the plural). Every count the product prints says
    it this way, never with an s in brackets; the status page has the same helper in its script."""
    return f"{count} {one if count == 1 else (many if many is not None else one + 's')}"


def humanize_size(size: int) -> str:
    """Return ``size`` bytes for people, in the largest binary unit that keeps the number at least
    1, one decimal: ``"2.1GiB"``, ``"64.0MiB"``, ``"900B"`` (the tables of ``retention plan`` and
    ``status``, and the planner's explanations)."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return f"{size}B"


def format_size(size: int) -> str:
    """Return ``size`` bytes in the largest binary unit that divides it exactly (``"64MiB"``)."""
    for unit in ("GiB", "MiB", "KiB"):
        if size and size % SIZE_UNITS[unit] == 0:
            return f"{size // SIZE_UNITS[unit]}{unit}"
    return f"{size}B"
