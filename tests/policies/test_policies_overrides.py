"""Per-log overrides: a log sets policy keys in place, validated as a policy is, and the planner
decides its segments under the policy in force for it."""

from __future__ import annotations

import pytest
from plan_builders import NOW, log

from policies import DELETE, KEEP, SIZE_CAP, ConfigError, parse_config, plan

YAML = """\
logs:
  staging:
    path: /tmp/never-staging
    overrides:
      reserve: 1h
      retention_bytes: 3000B
      disk: {clean_ratio: 0.6}
  clicks:
    path: /tmp/never-clicks
policies:
  default:
    reserve: 2d
    disk: {clean_ratio: 0.7, force_ratio: 0.8}
"""


def test_a_log_sets_policy_keys_in_place_and_a_section_merges_key_by_key():
    config = parse_config(YAML)
    staging, clicks = config.policy_for("staging"), config.policy_for("clicks")
    assert (staging.reserve, staging.retention_bytes, staging.disk.clean_ratio, staging.disk.force_ratio) == \
        (3600.0, 3000, 0.6, 0.8)
    assert clicks is config.policies["default"] and clicks.reserve == 2 * 86400


@pytest.mark.parametrize(("overrides", "line"), [
    ("{reserve: -1h}", "logs.staging.overrides.reserve: must be positive"),
    ("{reserv: 1h}", "logs.staging.overrides.reserv: unknown policy key"),
    ("{disk: {clean_ratio: 0.9}}", "logs.staging.overrides.disk"),          # above the policy's force_ratio
    ("{interval: 1s}", "logs.staging.overrides.interval: is the policy's schedule"),
    ("{hung: {retry_every: 1s}}", "logs.staging.overrides.hung.retry_every: is the policy's schedule"),
    ("[reserve]", "logs.staging.overrides: expected a mapping"),
    ("{archive: {interval: 0s}}", "logs.staging.overrides.archive.interval: must be positive"),
    ("{archive: {url: 's3://k:s@b'}}", "logs.staging.overrides.archive.url: credentials never go in"),
])
def test_a_bad_override_is_one_line_naming_the_file_line_and_key(overrides, line):
    text = f"logs:\n  staging:\n    path: /tmp/never-staging\n    overrides: {overrides}\n" \
           "policies:\n  default: {disk: {clean_ratio: 0.7, force_ratio: 0.8}}\n"
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source="r.yaml")
    message = str(caught.value)
    assert message.startswith("r.yaml:4: ") and line in message, message


def test_the_planner_decides_a_log_under_its_overrides_and_its_neighbour_under_the_policy():
    config = parse_config(YAML)
    logs = [log([1.0] * 5, name="staging"), log([1.0] * 5, name="clicks")]
    the_plan = plan(logs, config.policies_in_force, NOW)
    staging, clicks = the_plan.log("staging"), the_plan.log("clicks")
    assert SIZE_CAP in staging.triggers and [d.action for d in staging.decisions][:2] == [DELETE, DELETE]
    assert [d.action for d in clicks.decisions] == [KEEP] * 5


def test_a_log_archives_to_a_tier_of_its_own_while_its_neighbour_archives_nothing():
    config = parse_config(YAML.replace("      disk: {clean_ratio: 0.6}\n",
                                       "      disk: {clean_ratio: 0.6}\n"
                                       "      archive: {url: 's3://bucket/staging', upload_after: 5m}\n"))
    staging, clicks = config.policy_for("staging").archive, config.policy_for("clicks").archive
    assert (staging.url, staging.upload_after, staging.enabled) == ("s3://bucket/staging", 300.0, True)
    assert (clicks.url, clicks.enabled) == (None, False)
