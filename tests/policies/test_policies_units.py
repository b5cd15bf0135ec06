"""Parsing of durations, sizes, ratios and hours; counts said with their noun."""

from __future__ import annotations

import ast
import re
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from policies import (
    format_duration,
    format_size,
    humanize_duration,
    humanize_size,
    parse_duration,
    parse_hours,
    parse_ratio,
    parse_size,
    plural,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("100ms", 0.1),
        ("10s", 10.0),
        ("1.5s", 1.5),
        ("2m", 120.0),
        ("72h", 259200.0),
        ("7d", 604800.0),
        ("0s", 0.0),
        ("-5s", -5.0),
        (" 10s ", 10.0),
        ("10 s", 10.0),
    ],
)
def test_parses_durations_with_a_unit(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


def test_accepts_a_timedelta_as_duration():
    assert parse_duration(timedelta(minutes=2)) == 120.0


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (10, "a duration needs a unit"),
        (1.5, "a duration needs a unit"),
        (0, "a duration needs a unit"),
        ("10", "a duration needs a unit"),
        (True, "a duration needs a unit"),
        ("10sec", "unknown duration unit 'sec'"),
        ("10S", "unknown duration unit 'S'"),
        ("1e3ms", "expected a duration"),
        ("ten seconds", "expected a duration"),
        ("", "expected a duration"),
        (None, "expected a duration"),
        ([10], "expected a duration"),
        ("99999999d", "must not be longer than 36500d"),
    ],
)
def test_rejects_durations_without_a_clear_unit(value, reason):
    with pytest.raises(ValueError, match=reason):
        parse_duration(value)


@pytest.mark.parametrize(
    ("value", "size"),
    [(4096, 4096), (0, 0), ("64MiB", 64 * 2**20), ("1GiB", 2**30), ("512KiB", 512 * 1024), ("100B", 100), ("100", 100), ("1.5KiB", 1536)],
)
def test_parses_sizes(value, size):
    assert parse_size(value) == size


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("64MB", "unknown size unit 'MB'"),
        ("1TiB", "unknown size unit 'TiB'"),
        ("0.3KiB", "must be a whole number of bytes"),
        (-1, "must not be negative"),
        ("-1KiB", "must not be negative"),
        (True, "expected a size"),
        (1.5, "expected a size"),
        ("big", "expected a size"),
    ],
)
def test_rejects_bad_sizes(value, reason):
    with pytest.raises(ValueError, match=reason):
        parse_size(value)


@pytest.mark.parametrize(("value", "ratio"), [(0.75, 0.75), ("75%", 0.75), ("7.5%", 0.075), (0, 0.0), (1, 1.0), ("100%", 1.0), ("0%", 0.0)])
def test_parses_ratios(value, ratio):
    assert parse_ratio(value) == pytest.approx(ratio)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (True, "expected a ratio"),
        (False, "expected a ratio"),
        ("0.75", "expected a ratio"),
        ("75", "expected a ratio"),
        (1.5, "must be between 0 and 1, got 1.5"),
        (-0.1, "must be between 0 and 1, got -0.1"),
        ("150%", "must be between 0 and 1, got 150%"),
        (float("nan"), "must be between 0 and 1"),
        (None, "expected a ratio"),
    ],
)
def test_rejects_bad_ratios(value, reason):
    with pytest.raises(ValueError, match=reason):
        parse_ratio(value)


@pytest.mark.parametrize(
    ("value", "hours"),
    [([4], (4,)), ([5, 4, 4], (4, 5)), ([], ()), (4, (4,)), ("04", (4,)), ("04;05", (4, 5)), ("4; 23;0", (0, 4, 23)), ([0, 23], (0, 23)),
     ("00-23", tuple(range(24))), ("09-11;22-23", (9, 10, 11, 22, 23)), ("5-5", (5,))],
)
def test_parses_hours(value, hours):
    assert parse_hours(value) == hours


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ([4, 24], "hour 24 is outside 0-23"),
        ([-1], "hour -1 is outside 0-23"),
        ("04;25", "hour 25 is outside 0-23"),
        ("04,05", "separated by ';'"),
        ("04;", "separated by ';'"),
        ("23-02", "ends before it starts"),
        ("00-24", "hour 24 is outside 0-23"),
        ("4-", "separated by ';'"),
        ("", "write \\[\\] for no delete hour"),
        (["4"], "each hour must be an integer"),
        ([True], "each hour must be an integer"),
        (True, "expected hours"),
        (4.0, "expected hours"),
    ],
)
def test_rejects_bad_hours(value, reason):
    with pytest.raises(ValueError, match=reason):
        parse_hours(value)


@given(st.integers(min_value=0, max_value=10**9), st.sampled_from(["ms", "s", "m", "h", "d"]))
def test_duration_formatting_reads_back(count, unit):
    assume(count * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}[unit] <= 36500 * 86400)
    seconds = parse_duration(f"{count}{unit}")
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds)


@given(st.floats(min_value=0, max_value=1e6, allow_nan=False))
def test_any_non_negative_seconds_format_to_a_readable_duration(seconds):
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds, rel=1e-9, abs=1e-9)


@given(st.integers(min_value=0, max_value=2**40), st.sampled_from(["B", "KiB", "MiB", "GiB"]))
def test_sizes_scale_by_binary_units(count, unit):
    factor = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[unit]
    assert parse_size(f"{count}{unit}") == count * factor
    assert parse_size(format_size(count * factor)) == count * factor


@given(st.integers(min_value=0, max_value=100))
def test_percentages_equal_their_fraction(percent):
    assert parse_ratio(f"{percent}%") == pytest.approx(percent / 100)


@given(st.lists(st.integers(min_value=0, max_value=23)))
def test_hour_list_and_rocketmq_string_agree(hours):
    as_string = ";".join(f"{hour:02d}" for hour in hours)
    parsed = parse_hours(hours)
    assert parsed == tuple(sorted(set(hours)))
    if hours:
        assert parse_hours(as_string) == parsed


@pytest.mark.parametrize(
    ("seconds", "text"), [(11520, "3h12m"), (4 * 86400 + 7200 + 5, "4d2h"), (0.1, "100ms"), (45, "45s"), (-5, "-5s"), (3600, "1h")]
)
def test_humanizes_durations_to_two_units(seconds, text):
    assert humanize_duration(seconds) == text


@pytest.mark.parametrize(("size", "shown"), [(0, "0B"), (900, "900B"), (1023, "1023B"), (1024, "1.0KiB"),
                                             (49152, "48.0KiB"), (2254857830, "2.1GiB"), (5 << 40, "5.0TiB"),
                                             (-2048, "-2.0KiB")])
def test_sizes_for_people_keep_one_decimal_in_the_largest_unit_at_least_one(size, shown):
    assert humanize_size(size) == shown


def test_a_count_takes_the_noun_its_number_needs_and_no_message_says_noun_s():
    assert [plural(n, "segment") for n in (0, 1, 2)] == ["0 segments", "1 segment", "2 segments"]
    assert plural(1, "log directory", "log directories") == "1 log directory"
    assert plural(3, "log directory", "log directories") == "3 log directories"
    # Every message of the sidecar and the planner, and the status page, says it so: no "segment(s)"
    # in a string of their Python (f-strings' parts too) or a string or template literal of the page.
    root = Path(__file__).resolve().parents[2]
    said = []
    for folder in ("retention", "policies"):
        for path in sorted((root / folder).rglob("*.py")):
            said += [(path.name, node.value) for node in ast.walk(ast.parse(path.read_text()))
                     if isinstance(node, ast.Constant) and isinstance(node.value, str) and _noun_s(node.value)]
    page = (root / "retention" / "web" / "static" / "status.html").read_text()
    said += [("status.html", literal) for literal in re.findall(r'"[^"\n]*"|`[^`]*`|\'[^\'\n]*\'', page) if _noun_s(literal)]
    assert said == [], said


def _noun_s(text: str) -> bool:
    return re.search(r"[a-z]\(s\)", text.replace("http(s)", "")) is not None
