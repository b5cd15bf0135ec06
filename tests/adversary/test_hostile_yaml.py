"""Hostile configuration files: `retention check` answers every one in one line (exit 0 or 2), within
a memory and time bound, never a traceback; a sidecar sent one by SIGHUP keeps its configuration.

The brief run (`make test`) checks every named probe of issue 34 and a fixed set of generated files;
`-m fuzz` runs thousands (HOSTILE_SEEDS=<first>:<count>, default 0:3000)."""

from __future__ import annotations

import os
import re
import resource
import signal
import time

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies import ConfigError, RetentionConfig, parse_config

from hostile_helpers import BOMBS, CHECK_MEMORY_LIMIT, VALID_CONFIG, mutated_config, run_check
from retention_helpers import config_text, make_log, write_config
from sidecar_helpers import Sidecar

BRIEF_SEEDS = range(200)          # in-process, about 0.02 s each (a few take seconds)
BRIEF_CLI_SEEDS = range(6)        # through the real CLI, about 0.5 s each
PARSE_SECONDS = 30.0


def _seeds(default: str) -> range:
    first, _, count = os.environ.get("HOSTILE_SEEDS", default).partition(":")
    return range(int(first), int(first) + int(count))


def _assert_verdict(text: str, base_dir) -> None:
    """parse_config either accepts ``text`` or raises ConfigError, whose message is one short line,
    within PARSE_SECONDS (the largest file the loader reads takes a few seconds on a loaded machine)."""
    started = time.monotonic()
    try:
        result = parse_config(text, source="fuzz.yaml", base_dir=base_dir)
    except ConfigError as error:
        message = str(error)
        assert "\n" not in message and len(message) < 1200, message
    else:
        assert isinstance(result, RetentionConfig)
    assert time.monotonic() - started < PARSE_SECONDS, f"{time.monotonic() - started:.1f}s for {text[:200]!r}"


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_a_hostile_file_gets_one_line_and_exit_2_within_bounds(name, tmp_path):
    config = tmp_path / "retention.yaml"
    config.write_text(BOMBS[name], encoding="utf-8", errors="surrogatepass")
    run = run_check(config, cwd=tmp_path)
    run.assert_one_line_verdict()
    assert run.returncode == 2
    assert "retention.yaml" in run.stderr


def test_a_fifo_nobody_writes_is_an_empty_file_not_a_hang(tmp_path):
    fifo = tmp_path / "retention.yaml"
    os.mkfifo(fifo)
    run = run_check(fifo, cwd=tmp_path)
    run.assert_one_line_verdict()
    assert run.returncode == 2 and "the configuration is empty" in run.stderr


def test_the_alias_bomb_is_a_few_hundred_bytes_and_refused_by_counting_values(tmp_path):
    config = tmp_path / "bomb.yaml"
    config.write_text(BOMBS["alias_bomb"])
    assert config.stat().st_size < 400
    run = run_check(config, cwd=tmp_path)
    assert run.returncode == 2 and "more than 100000 values" in run.stderr, run


@pytest.mark.parametrize("name,expected", [
    ("deep_nesting", "nested deeper than"), ("huge_integer", "an integer of 5000 characters"),
    ("nul_in_a_path", "service.audit: a path cannot contain a NUL character"),
    ("control_character", "the character U+0001 is not allowed"),
    ("long_path", "is larger than 256 KiB"), ("long_path_under_the_size_cap", "logs.big.path: a path is at most"),
    ("recursive_alias", "inside the node it names")])
def test_each_probe_is_named_in_plain_words(name, expected, tmp_path):
    with pytest.raises(ConfigError, match=re.escape(expected)):
        parse_config(BOMBS[name], source="retention.yaml", base_dir=tmp_path)


def test_a_printed_value_is_shortened_whatever_its_size(tmp_path):
    text = "service:\n  listen: [" + ", ".join(["'" + "y" * 1000 + "'"] * 50) + "]\n"
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source="retention.yaml", base_dir=tmp_path)
    assert "service.listen: expected a string, got ['yyy" in str(caught.value) and len(str(caught.value)) < 600


def test_generated_hostile_configurations_get_a_one_line_verdict(tmp_path):
    for seed in BRIEF_SEEDS:
        _assert_verdict(mutated_config(seed), tmp_path)


def test_generated_hostile_configurations_through_the_cli(tmp_path):
    for seed in BRIEF_CLI_SEEDS:
        config = tmp_path / f"seed-{seed}.yaml"
        config.write_text(mutated_config(seed), encoding="utf-8", errors="surrogatepass")
        run_check(config, cwd=tmp_path).assert_one_line_verdict()


_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=60),
                     st.sampled_from(["10s", "64KiB", "75%", "0.0.0.0:0", "/", "~", "<<", "UTC"]))
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=20)
_sections = st.fixed_dictionaries({}, optional={
    "service": st.dictionaries(st.sampled_from(sorted(VALID_CONFIG["service"]) + ["token", "x"]), _values),
    "logs": st.dictionaries(st.text(min_size=1, max_size=8), st.dictionaries(
        st.sampled_from(["path", "segment_size", "policy", "overrides", "archive"]), _values)),
    "policies": st.dictionaries(st.sampled_from(["default", "business"]), st.dictionaries(
        st.sampled_from(sorted(VALID_CONFIG["policies"]["business"]) + ["timezone", "manual_passes"]), _values)),
})


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(tree=_sections)
def test_any_tree_of_yaml_values_gets_a_one_line_verdict(tree, tmp_path_factory):
    _assert_verdict(yaml.safe_dump(tree, allow_unicode=True), tmp_path_factory.getbasetemp())


@pytest.mark.fuzz
@pytest.mark.timeout(0)
def test_fuzz_hostile_configurations(tmp_path):
    """The long run: in-process for every seed, and every 50th through the CLI under the memory cap."""
    for seed in _seeds("0:3000"):
        text = mutated_config(seed)
        _assert_verdict(text, tmp_path)
        if seed % 50 == 0:
            config = tmp_path / "seed.yaml"
            config.write_text(text, encoding="utf-8", errors="surrogatepass")
            run_check(config, cwd=tmp_path).assert_one_line_verdict()


def _peak_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))


def test_a_bomb_sent_by_sighup_fails_the_reload_and_the_old_configuration_keeps_running(tmp_path):
    make_log(tmp_path / "staging", 1)
    good = config_text(tmp_path, sidecar=True, policy={"interval": "1h", "delete_at_hours": []})
    config_path, _ = write_config(tmp_path, good)
    with Sidecar(config_path, cwd=tmp_path) as s:
        s.wait_ready()
        resource.prlimit(s.proc.pid, resource.RLIMIT_AS, (CHECK_MEMORY_LIMIT, CHECK_MEMORY_LIMIT))
        for count, name in enumerate(["alias_bomb", "deep_nesting", "huge_integer", "control_character",
                                      "long_path"], start=1):
            config_path.write_text(BOMBS[name])
            s.send(signal.SIGHUP)
            s.wait_for(lambda: s.log().count("reload (SIGHUP) failed") == count, what=f"reload {count} ({name})",
                       timeout=60)
            assert s.proc.poll() is None
        errors = [line for line in s.log().splitlines() if "reload (SIGHUP) failed" in line]
        assert all(len(line) < 1500 for line in errors), errors
        assert "Traceback" not in s.log()
        status, body = s.get_json("/healthz")          # a warning: the old configuration still cleans
        assert status == 200 and [(d["problem"], d["severity"]) for d in body["details"]] == [("reload-failed", "warning")]
        assert s.get_json("/status")[1]["policies"]["default"]["interval_seconds"] == 3600
        assert _peak_rss_kib(s.proc.pid) < 400 * 1024
        assert s.stop() == 0
