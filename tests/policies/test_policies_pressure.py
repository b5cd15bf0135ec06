"""policies.pressure: levels from the used ratio, forcing and its hysteresis down to force_target."""

from __future__ import annotations

import pytest

from policies import (DISK_FORCE, LEVEL_CLEAN, LEVEL_FORCE, LEVEL_OK, LEVEL_REFUSE, DiskConfig, Pressure,
                      disk_triggers, pressure)

DISK = DiskConfig(clean_ratio=0.75, force_ratio=0.85, refuse_writes_ratio=0.90, force_target=0.60)


@pytest.mark.parametrize("ratio, level, forcing", [
    (0.10, LEVEL_OK, False), (0.75, LEVEL_OK, False), (0.7501, LEVEL_CLEAN, False),
    (0.85, LEVEL_CLEAN, False), (0.8501, LEVEL_FORCE, True), (0.90, LEVEL_FORCE, True),
    (0.9001, LEVEL_REFUSE, True)])
def test_each_threshold_is_crossed_strictly_above(ratio, level, forcing):
    p = pressure(ratio, [DISK])
    assert (p.level, p.forcing) == (level, forcing)


def test_a_force_under_way_lasts_down_to_force_target_then_ends():
    assert pressure(0.80, [DISK]).forcing is False                       # not started: clean only
    assert pressure(0.80, [DISK], forcing_before=True).forcing is True   # started above 0.85: goes on
    assert pressure(0.6001, [DISK], forcing_before=True).forcing is True
    assert pressure(0.60, [DISK], forcing_before=True).forcing is False  # at force_target: done
    assert pressure(0.80, [DISK], forcing_before=True).level == LEVEL_CLEAN


def test_force_target_unset_means_clean_ratio():
    disk = DiskConfig(clean_ratio=0.70, force_ratio=0.85, refuse_writes_ratio=0.90)
    assert pressure(0.71, [disk], forcing_before=True).forcing is True
    assert pressure(0.70, [disk], forcing_before=True).forcing is False


def test_with_force_off_nothing_forces_even_when_writes_are_refused():
    disk = DiskConfig(clean_ratio=0.75, force_ratio=0.85, refuse_writes_ratio=0.90, force=False)
    assert pressure(0.88, [disk]).forcing is False
    assert pressure(0.91, [disk]) == Pressure(LEVEL_REFUSE, False)
    assert pressure(0.88, [disk], forcing_before=True).forcing is False


def test_the_most_pressing_policy_on_a_shared_disk_decides():
    lax = DiskConfig(clean_ratio=0.90, force_ratio=0.95, refuse_writes_ratio=0.97)
    assert pressure(0.86, [lax, DISK]).level == LEVEL_FORCE
    assert pressure(0.86, [lax]).level == LEVEL_OK


def test_the_planner_trigger_follows_the_same_hysteresis():
    assert DISK_FORCE not in disk_triggers(DISK, 0.80)
    assert DISK_FORCE in disk_triggers(DISK, 0.80, forcing=True)
    assert DISK_FORCE not in disk_triggers(DISK, 0.60, forcing=True)
