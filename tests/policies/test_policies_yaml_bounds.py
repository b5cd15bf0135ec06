"""The loader's bounds (policies.yaml_bounds) keep what a legitimate file does: anchors, aliases and
`<<` merges work within the budget; the bounds refuse only what exceeds them; a ConfigError line and
a printed value are short whatever the input."""

from __future__ import annotations

import pytest

from policies import ConfigError, parse_config
from policies.config.fields import ConfigError as FieldsConfigError
from policies.units import describe_value, shown
from policies.yaml_bounds import MAX_DEPTH, MAX_INT_CHARS, MAX_NODES

SHARED_POLICY = """
policies:
  base: &base
    reserve: 48h
    files_per_pass: 5
  business:
    <<: *base
    reserve: 72h
  batch: *base
"""


def test_anchors_aliases_and_merges_still_work(tmp_path):
    config = parse_config(SHARED_POLICY, base_dir=tmp_path)
    assert config.policies["business"].reserve == 72 * 3600 and config.policies["business"].files_per_pass == 5
    assert config.policies["batch"].reserve == 48 * 3600


def test_an_alias_counts_as_every_value_it_repeats(tmp_path):
    per_copy = 1 + 2 * 2            # a mapping node, then two keys and two values
    copies = MAX_NODES // per_copy + 1
    text = "a: &a {x: 1, y: 2}\nservice:\n  listen: [" + ", ".join(["*a"] * copies) + "]\n"
    with pytest.raises(ConfigError, match=f"more than {MAX_NODES} values"):
        parse_config(text, base_dir=tmp_path)
    small = "a: &a {x: 1, y: 2}\nservice:\n  listen: [" + ", ".join(["*a"] * 100) + "]\n"
    with pytest.raises(ConfigError, match="a: unknown key"):      # within budget: validated as usual
        parse_config(small, base_dir=tmp_path)


def test_nesting_up_to_the_bound_is_read_and_beyond_it_refused(tmp_path):
    def nested(depth):
        return "service: " + "[" * (depth - 1) + "]" * (depth - 1) + "\n"
    with pytest.raises(ConfigError, match="service: expected a mapping"):
        parse_config(nested(MAX_DEPTH), base_dir=tmp_path)
    with pytest.raises(ConfigError, match=f"nested deeper than {MAX_DEPTH} levels"):
        parse_config(nested(MAX_DEPTH + 1), base_dir=tmp_path)


def test_an_integer_longer_than_the_bound_is_refused_with_its_line(tmp_path):
    fits = "service:\n  max_connections: " + "1" * MAX_INT_CHARS + "\n"
    with pytest.raises(ConfigError, match="max_connections"):
        parse_config(fits, base_dir=tmp_path)
    with pytest.raises(ConfigError, match=rf"^<string>:2: invalid YAML: an integer of {MAX_INT_CHARS + 1} characters"):
        parse_config("service:\n  max_connections: " + "1" * (MAX_INT_CHARS + 1) + "\n", base_dir=tmp_path)


def test_a_config_error_line_is_bounded_and_printable_in_every_part():
    error = FieldsConfigError("why " * 1000 + "\x00", source="/x/" + "s" * 5000, line=3, key_path="k." * 500)
    line = str(error)
    assert len(line) < 1200 and line.isprintable() and "..." in line
    assert line.startswith("/x/sss") and line.endswith("why \\x00")


def test_a_printed_value_is_shortened_without_building_its_whole_repr():
    value: list = ["x" * 10_000]
    for _ in range(30):
        value = [value] * 10          # 10**30 strings if written out
    assert len(shown(value)) < 300 and len(describe_value("y" * 1_000_000)) < 100
