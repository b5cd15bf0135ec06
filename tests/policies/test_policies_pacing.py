"""The arithmetic of disk.delete_rate (policies.pacing): the byte bucket's waits on a fake monotonic
clock, the truncation step, when the rate is not applied, and the key's parsing."""

from __future__ import annotations

import pytest

from policies import (DISK_CLEAN, DISK_FORCE, MANUAL, REFUSE_WRITES, TIME_WINDOW, BytePacer, ConfigError,
                      load_config, step_bytes, unpaced_reason)

MIB = 1 << 20


def test_each_removal_costs_its_bytes_at_the_rate_before_the_next():
    bucket = BytePacer()
    assert bucket.due(100.0) == 0.0                       # nothing spent: nothing owed
    assert bucket.spend(MIB, 2 * MIB, 100.0) == 0.5
    assert bucket.due(100.2) == pytest.approx(0.3)
    # Spent again before it was paid: the new cost queues behind the old one.
    assert bucket.spend(MIB, 2 * MIB, 100.2) == pytest.approx(0.8)
    assert bucket.due(101.0) == 0.0


def test_a_bucket_left_idle_grants_no_burst():
    bucket = BytePacer()
    bucket.spend(MIB, MIB, 0.0)
    # An hour idle: the timeline restarts at the present, so the next megabyte still costs a second.
    assert bucket.spend(MIB, MIB, 3600.0) == 1.0


def test_bytes_removed_never_outrun_the_rate_over_a_run():
    """Removing at once whenever due is 0, on a fake clock: by any removal, the bytes removed before
    it were paid at the rate."""
    bucket, now, removed = BytePacer(), 0.0, 0
    sizes = [3 * MIB, MIB, 64 * MIB, 512, 7 * MIB] * 4
    rate = 5 * MIB
    for size in sizes:
        now += bucket.due(now)
        assert removed <= rate * now + 1e-6
        bucket.spend(size, rate, now)
        removed += size
    assert now == pytest.approx((sum(sizes) - sizes[-1]) / rate)


def test_rates_of_several_policies_share_one_timeline():
    bucket = BytePacer()
    bucket.spend(4 * MIB, 4 * MIB, 0.0)     # a second
    assert bucket.spend(MIB, MIB, 0.0) == 2.0   # plus a second at the other policy's rate


@pytest.mark.parametrize(("rate", "step"), [(MIB, MIB), (2 * MIB, MIB), (16 * MIB, 4 * MIB),
                                            (256 * MIB, 64 * MIB), (4096 * MIB, 64 * MIB)])
def test_a_step_is_a_quarter_second_of_bytes_between_1_and_64_mib(rate, step):
    assert step_bytes(rate) == step


def test_the_rate_is_not_applied_over_force_ratio_or_refuse_writes_ratio():
    assert unpaced_reason((TIME_WINDOW, DISK_CLEAN, MANUAL)) is None
    assert unpaced_reason((DISK_CLEAN, DISK_FORCE)) == "over force_ratio: delete_rate not applied"
    # Over refuse_writes_ratio with force off, writers are refused: no reason to spare them.
    assert unpaced_reason((DISK_CLEAN, REFUSE_WRITES)) == "over refuse_writes_ratio: delete_rate not applied"


def _load(tmp_path, disk: str):
    path = tmp_path / "retention.yaml"
    path.write_text(f"logs:\n  a:\n    path: a\npolicies:\n  default:\n    disk:\n{disk}")
    return load_config(path, base_dir=tmp_path)


def test_delete_rate_is_a_size_per_second_and_null_turns_it_off(tmp_path):
    assert _load(tmp_path, "      delete_rate: 128MiB\n").policies["default"].disk.delete_rate == 128 * MIB
    assert _load(tmp_path, "      delete_rate: null\n").policies["default"].disk.delete_rate is None
    assert _load(tmp_path, "      force: true\n").policies["default"].disk.delete_rate == 256 * MIB


@pytest.mark.parametrize(("value", "reason"), [
    ("0", "must be positive (null deletes at full speed), got 0"),
    ("0MiB", "must be positive (null deletes at full speed), got '0MiB'"),
    ("fast", "expected a size such as '64MiB', '1GiB' or a number of bytes, got 'fast'"),
])
def test_a_bad_delete_rate_is_one_line_naming_the_key(tmp_path, value, reason):
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, f"      delete_rate: {value}\n")
    assert str(caught.value) == f"{tmp_path / 'retention.yaml'}:7: policies.default.disk.delete_rate: {reason}"
