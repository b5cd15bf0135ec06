"""Configuration: the documented example, defaults, paths, and one-line errors for every rejection."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from plan_builders import design_example_yaml

from policies import (
    ConfigError,
    DiskConfig,
    PolicyConfig,
    RetentionConfig,
    ServiceConfig,
    load_config,
    parse_config,
)

BAD_CONFIGS = sorted((Path(__file__).parent / "bad_configs").glob("*.yaml"))
EXPECT_HEADER = re.compile(r"# expect: (?P<expected>.+)")


def expected_substring(path: Path) -> str:
    first_line = path.read_text(encoding="utf-8").splitlines()[0]
    match = EXPECT_HEADER.fullmatch(first_line)
    assert match, f"{path.name} must start with '# expect: <substring>'"
    return match["expected"]


def test_there_are_enough_bad_configuration_files():
    assert len(BAD_CONFIGS) >= 15


@pytest.mark.parametrize("path", BAD_CONFIGS, ids=[path.stem for path in BAD_CONFIGS])
def test_rejects_bad_configuration_file_with_one_line_error(path, tmp_path):
    with pytest.raises(ConfigError) as caught:
        load_config(path, base_dir=tmp_path)
    error = caught.value
    message = str(error)
    lines = path.read_text(encoding="utf-8").splitlines()

    assert "\n" not in message
    assert expected_substring(path) in message
    assert message.startswith(str(path) + (f":{error.line}: " if error.line is not None else ": "))
    assert error.source == str(path)
    if error.key_path:
        assert f"{error.key_path}: {error.reason}" in message
        assert error.line is not None and 1 < error.line <= len(lines)
        keys = error.key_path.split(".")
        at_line = lines[error.line - 1]
        # The line is the one holding the blamed key; a key absent from the file points at its parent.
        if any(line.lstrip().startswith(f"{keys[-1]}:") for line in lines[1:]):
            assert at_line.lstrip().startswith(f"{keys[-1]}:")
        else:
            assert any(at_line.lstrip().startswith(f"{key}:") for key in keys)
    elif path.stem != "empty":
        assert error.line is not None and 1 < error.line <= len(lines)


def test_bad_configuration_files_fail_the_same_way_from_any_base_directory(tmp_path):
    for path in BAD_CONFIGS:
        with pytest.raises(ConfigError, match=re.escape(expected_substring(path))):
            load_config(path)


def test_design_example_parses_to_the_documented_values(tmp_path):
    config = parse_config(design_example_yaml(), source="retention.yaml", base_dir=tmp_path)

    assert config.service.listen == "127.0.0.1:9464"
    assert (config.service.host, config.service.port, config.service.is_loopback) == ("127.0.0.1", 9464, True)
    assert config.service.log_level == "INFO"
    assert config.service.log_format == "text"
    assert config.service.audit == tmp_path / "data/audit.jsonl"
    assert config.service.token is None

    staging = config.logs["staging"]
    assert staging.path == tmp_path / "data/staging"
    assert staging.segment_size == 64 * 2**20
    assert staging.policy == "default"

    default = config.policies["default"]
    assert default.interval == 10.0
    assert default.delete_at_hours == (4,)
    assert default.timezone is None and default.zone is None
    assert default.reserve == 72 * 3600.0
    assert default.files_per_pass == 10
    assert default.pause_between_files == pytest.approx(0.1)
    assert default.manual_passes == 20
    assert default.protect_unconsumed is True
    assert default.consumer_ttl == 7 * 86400.0
    assert default.disk_check_interval == 1.0
    assert default.disk == DiskConfig(clean_ratio=0.75, force_ratio=0.85, refuse_writes_ratio=0.90, force=True,
                                      force_target=0.75)
    assert default.hung.force_after == 120.0
    assert default.hung.retry_every == 120.0
    assert config.policy_for("staging") is default


def test_design_example_equals_the_defaults(tmp_path):
    config = parse_config(design_example_yaml(), base_dir=tmp_path)
    # The contract writes out force_target; unset, it is clean_ratio, the same 0.75.
    assert config.policies["default"] == PolicyConfig.model_validate({"disk": {"force_target": 0.75}})
    assert PolicyConfig().disk.force_target is None
    assert PolicyConfig().disk.force_target_ratio == 0.75
    assert config.service == ServiceConfig.model_validate({}, context={"base_dir": tmp_path})


def test_a_file_without_policies_gets_the_default_policy(tmp_path):
    config = parse_config("logs:\n  staging:\n    path: data/staging\n", base_dir=tmp_path)
    assert dict(config.policies) == {"default": PolicyConfig()}
    assert config.policy_for("staging") == PolicyConfig()


def test_an_empty_mapping_is_a_complete_configuration(tmp_path):
    config = parse_config("{}", base_dir=tmp_path)
    assert dict(config.logs) == {}
    assert list(config.policies) == ["default"]
    assert config.service.audit == tmp_path / "data/audit.jsonl"


def test_other_policies_leave_the_implicit_default_in_place(tmp_path):
    text = """\
logs:
  a: {path: a}
  b: {path: b, policy: nightly}
policies:
  nightly:
    delete_at_hours: "01;02"
    timezone: Europe/Berlin
"""
    config = parse_config(text, base_dir=tmp_path)
    assert set(config.policies) == {"default", "nightly"}
    assert config.policy_for("a") == PolicyConfig()
    assert config.policy_for("b").delete_at_hours == (1, 2)
    assert str(config.policy_for("b").zone) == "Europe/Berlin"


def test_a_partial_default_policy_keeps_the_other_defaults(tmp_path):
    config = parse_config("policies:\n  default:\n    reserve: 1h\n    disk: {force: false}\n", base_dir=tmp_path)
    default = config.policies["default"]
    assert default.reserve == 3600.0
    assert default.disk.force is False
    assert default.disk.clean_ratio == 0.75
    assert default.files_per_pass == 10


def test_relative_paths_resolve_against_the_base_directory(tmp_path):
    config = parse_config("service: {audit: audit/trail.jsonl}\nlogs:\n  a: {path: logs/../logs/a}\n  b: {path: /srv/b}\n", base_dir=tmp_path)
    assert config.service.audit == tmp_path / "audit/trail.jsonl"
    assert config.logs["a"].path == tmp_path / "logs/a"
    assert config.logs["b"].path == Path("/srv/b")


def test_relative_paths_default_to_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = parse_config("logs:\n  a: {path: data/a}\n")
    assert config.logs["a"].path == tmp_path / "data/a"


def test_an_existing_log_directory_is_accepted(tmp_path):
    (tmp_path / "data/a").mkdir(parents=True)
    assert parse_config("logs:\n  a: {path: data/a}\n", base_dir=tmp_path).logs["a"].path.is_dir()


def test_a_symlink_to_another_logs_directory_is_the_same_path(tmp_path):
    (tmp_path / "data/a").mkdir(parents=True)
    (tmp_path / "alias").symlink_to(tmp_path / "data/a")
    with pytest.raises(ConfigError, match="logs.b.path: is already the path of log 'a'"):
        parse_config("logs:\n  a: {path: data/a}\n  b: {path: alias}\n", base_dir=tmp_path)


def test_an_existing_file_as_log_path_is_rejected(tmp_path):
    (tmp_path / "a").write_text("not a log")
    with pytest.raises(ConfigError, match="<string>:3: logs.a.path: .*/a exists and is not a directory"):
        parse_config("logs:\n  a:\n    path: a\n", base_dir=tmp_path)


@pytest.mark.parametrize(
    ("text", "key_path"),
    [
        ("bogus: 1\n", "bogus"),
        ("service:\n  bogus: 1\n", "service.bogus"),
        ("logs:\n  a:\n    path: a\n    bogus: 1\n", "logs.a.bogus"),
        ("policies:\n  default:\n    bogus: 1\n", "policies.default.bogus"),
        ("policies:\n  p:\n    disk:\n      bogus: 1\n", "policies.p.disk.bogus"),
        ("policies:\n  p:\n    hung:\n      bogus: 1\n", "policies.p.hung.bogus"),
    ],
)
def test_rejects_unknown_keys_at_every_level(text, key_path, tmp_path):
    with pytest.raises(ConfigError) as caught:
        parse_config(text, base_dir=tmp_path)
    assert caught.value.key_path == key_path
    assert caught.value.line == text.count("\n")
    assert caught.value.reason.startswith("unknown key")


@pytest.mark.parametrize(
    ("disk_yaml", "accepted"),
    [
        ("clean_ratio: 0.10", True),
        ("clean_ratio: 10%", True),
        ("clean_ratio: 0.0999", False),
        ("{clean_ratio: 0.95, force_ratio: 0.95, refuse_writes_ratio: 0.95}", True),
        ("{clean_ratio: 0.9501, force_ratio: 0.96, refuse_writes_ratio: 0.97}", False),
        ("refuse_writes_ratio: 1.0", True),
        ("refuse_writes_ratio: 100%", True),
        ("refuse_writes_ratio: 1.0001", False),
        ("refuse_writes_ratio: 100.1%", False),
        ("{clean_ratio: 0.1, force_ratio: 0, refuse_writes_ratio: 0.5}", False),
        ("{clean_ratio: 0.5, force_ratio: 0.5, refuse_writes_ratio: 0.5}", True),
    ],
)
def test_ratios_out_of_range_are_rejected_not_clamped(disk_yaml, accepted, tmp_path):
    text = f"policies:\n  default:\n    disk: {disk_yaml}\n" if disk_yaml.startswith("{") else f"policies:\n  default:\n    disk:\n      {disk_yaml}\n"
    if accepted:
        parse_config(text, base_dir=tmp_path)
    else:
        with pytest.raises(ConfigError, match="policies.default.disk"):
            parse_config(text, base_dir=tmp_path)


@pytest.mark.parametrize(
    ("policy_yaml", "field", "value"),
    [
        ("pause_between_files: 0s", "pause_between_files", 0.0),
        ("files_per_pass: 1", "files_per_pass", 1),
        ("manual_passes: 1", "manual_passes", 1),
        ("interval: 1ms", "interval", 0.001),
        ("delete_at_hours: []", "delete_at_hours", ()),
        ("delete_at_hours: [0, 23]", "delete_at_hours", (0, 23)),
        ("delete_at_hours: 04", "delete_at_hours", (4,)),
        ("timezone: UTC", "timezone", "UTC"),
    ],
)
def test_boundary_values_are_kept_as_written(policy_yaml, field, value, tmp_path):
    config = parse_config(f"policies:\n  default:\n    {policy_yaml}\n", base_dir=tmp_path)
    assert getattr(config.policies["default"], field) == value


@pytest.mark.parametrize(
    ("listen", "token", "loopback"),
    [
        ("127.0.0.1:9464", None, True),
        ("127.0.0.2:80", None, True),
        ("localhost:9464", None, True),
        ("[::1]:9464", None, True),
        ("0.0.0.0:9464", "s3cret", False),
        ("[::]:9464", "s3cret", False),
        ("metrics.example.com:9464", "s3cret", False),
    ],
)
def test_listen_addresses_and_the_token_rule(listen, token, loopback):
    service = ServiceConfig(listen=listen, token=token)
    assert service.is_loopback is loopback


@pytest.mark.parametrize("listen", ["0.0.0.0:9464", "[::]:9464", "metrics.example.com:9464"])
def test_listening_beyond_loopback_requires_a_token(listen, tmp_path):
    with pytest.raises(ConfigError, match="service.listen: .* so service.token is required"):
        parse_config(f"service:\n  listen: '{listen}'\n", base_dir=tmp_path)


@pytest.mark.parametrize(
    ("listen", "reason"),
    [("::1:9464", "an IPv6 host goes in brackets"), (":9464", "expected HOST:PORT"), ("host:70000", "port 70000 is outside 0-65535"), ("host:http", "expected HOST:PORT")],
)
def test_rejects_malformed_listen_addresses(listen, reason, tmp_path):
    with pytest.raises(ConfigError, match=reason):
        parse_config(f"service:\n  listen: '{listen}'\n", base_dir=tmp_path)


def test_log_level_is_case_insensitive(tmp_path):
    assert parse_config("service: {log_level: trace}", base_dir=tmp_path).service.log_level == "TRACE"


def test_an_empty_token_is_rejected(tmp_path):
    with pytest.raises(ConfigError, match="service.token: must not be empty"):
        parse_config("service:\n  token: ''\n", base_dir=tmp_path)


def test_reports_the_error_that_comes_first_in_the_file(tmp_path):
    text = "policies:\n  default:\n    reserve: 0s\n    interval: 0s\n    files_per_pass: x\n"
    with pytest.raises(ConfigError) as caught:
        parse_config(text, base_dir=tmp_path)
    assert (caught.value.line, caught.value.key_path) == (3, "policies.default.reserve")


def test_yaml_syntax_error_names_the_line(tmp_path):
    with pytest.raises(ConfigError) as caught:
        parse_config("policies:\n  default:\n    reserve: 72h\n   interval: 10s\n", source="conf/x.yaml", base_dir=tmp_path)
    assert str(caught.value).startswith("conf/x.yaml:4: invalid YAML: ")
    assert caught.value.key_path == ""


def test_yaml_tags_that_construct_objects_are_rejected(tmp_path):
    with pytest.raises(ConfigError, match="invalid YAML"):
        parse_config("logs: !!python/object:os.system {}\n", base_dir=tmp_path)


def test_error_attributes_and_format():
    error = ConfigError("must be between 0 and 1, got 1.5", source="conf/bad.yaml", line=12, key_path="policies.default.disk.force_ratio")
    assert str(error) == "conf/bad.yaml:12: policies.default.disk.force_ratio: must be between 0 and 1, got 1.5"
    assert isinstance(error, ValueError)
    assert (error.source, error.line, error.key_path, error.reason) == (
        "conf/bad.yaml",
        12,
        "policies.default.disk.force_ratio",
        "must be between 0 and 1, got 1.5",
    )
    assert str(ConfigError("multi\nline  reason", source="f.yaml")) == "f.yaml: multi line reason"


def test_an_unreadable_file_is_a_config_error(tmp_path):
    missing = tmp_path / "missing.yaml"
    with pytest.raises(ConfigError, match=re.escape(f"{missing}: cannot read the file")):
        load_config(missing)


def test_a_file_that_is_not_utf8_is_a_config_error(tmp_path):
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("service: {token: 'caf\xe9'}\n".encode("latin-1"))
    with pytest.raises(ConfigError, match="is not UTF-8 text"):
        load_config(latin)


def test_loaded_configuration_is_immutable(tmp_path):
    config = parse_config(design_example_yaml(), base_dir=tmp_path)
    with pytest.raises(Exception):
        config.policies["default"].reserve = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.policies["other"] = PolicyConfig()  # type: ignore[index]
    with pytest.raises(TypeError):
        config.logs["other"] = config.logs["staging"]  # type: ignore[index]


def test_dump_writes_units_and_reads_back(tmp_path):
    config = parse_config(design_example_yaml(), base_dir=tmp_path)
    dumped = config.model_dump(mode="json")
    assert dumped["policies"]["default"]["reserve"] == "3d"
    assert dumped["policies"]["default"]["pause_between_files"] == "100ms"
    assert dumped["logs"]["staging"]["segment_size"] == "64MiB"
    assert RetentionConfig.model_validate(dumped) == config


def test_every_field_is_documented():
    from policies import HungConfig, LogConfig

    for model in (ServiceConfig, LogConfig, PolicyConfig, DiskConfig, HungConfig, RetentionConfig):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no description"


@pytest.mark.parametrize(
    ("disk", "target"),
    [
        ({}, 0.75),
        ({"clean_ratio": 0.6}, 0.6),
        ({"force_target": 0.8}, 0.8),
        ({"force_target": "85%"}, 0.85),
        ({"clean_ratio": 0.6, "force_target": 0.5}, 0.5),
    ],
)
def test_force_target_defaults_to_clean_ratio(disk, target):
    assert DiskConfig.model_validate(disk).force_target_ratio == pytest.approx(target)


@pytest.mark.parametrize(
    ("text", "valid"),
    [
        ("{force_target: 0.85}", True),
        ("{force_target: 0.8501}", False),
        ("{force_ratio: 0.9, refuse_writes_ratio: 0.95, force_target: 0.9}", True),
        ("{force_target: 0.10}", True),
        ("{force_target: 0.0999}", False),
        ("{force_target: high}", False),
    ],
)
def test_force_target_range(text, valid, tmp_path):
    source = f"policies:\n  default:\n    disk: {text}\n"
    if valid:
        parse_config(source, base_dir=tmp_path)
    else:
        with pytest.raises(ConfigError, match="force_target"):
            parse_config(source, base_dir=tmp_path)


def test_segment_size_limits_and_default_are_the_stores():
    from commitlog import options
    for size in (options.MIN_SEGMENT_SIZE, options.MAX_SEGMENT_SIZE):
        config = parse_config(f"logs:\n  a:\n    path: a\n    segment_size: {size}\n")
        assert config.logs["a"].segment_size == size
    for size, message in ((options.MIN_SEGMENT_SIZE - 1, "at least 4KiB"),
                          (options.MAX_SEGMENT_SIZE + 1, "at most")):
        with pytest.raises(ConfigError, match=message):
            parse_config(f"logs:\n  a:\n    path: a\n    segment_size: {size}\n")
    default = parse_config("logs:\n  a:\n    path: a\n").logs["a"].segment_size
    assert default == options.DEFAULT_SEGMENT_SIZE
    assert PolicyConfig().disk.refuse_writes_ratio == options.DEFAULT_REFUSE_WRITES_RATIO


def test_allowed_hosts_are_kept_in_the_form_host_headers_are_compared_in(tmp_path):
    config = parse_config("service:\n  allowed_hosts: [Retention.NS.svc., '[::1]', 10.0.0.7, retention.ns.svc]\n",
                          base_dir=tmp_path)
    assert config.service.allowed_hosts == ("retention.ns.svc", "::1", "10.0.0.7")
    assert ServiceConfig().allowed_hosts == ()


@pytest.mark.parametrize("value, reason", [
    ("retention.internal", "expected a list of host names"),
    ("[a b]", "'a b' (a string) is not a host name or IP address"),
    ("['*.example']", "is not a host name or IP address"),
    ("['']", "is not a host name or IP address"),
    ("[" + ", ".join(f"h{n}" for n in range(65)) + "]", "at most 64 names, got 65"),
])
def test_rejects_allowed_hosts_that_are_not_names(value, reason, tmp_path):
    with pytest.raises(ConfigError, match=re.escape(reason)):
        parse_config(f"service:\n  allowed_hosts: {value}\n", base_dir=tmp_path)
