"""Issue 34, part 2: a symbolic link planted at any name of a log directory's layout (read from
commitlog.layout's table, so a name added later is probed too) never makes the store, the
sidecar or the Spark layer read, write, truncate or delete its target."""

from __future__ import annotations

import pytest

from commitlog.layout import layout_names

from symlinks_helpers import DAMAGED_AT, plant_and_run

NAMES = layout_names(DAMAGED_AT)


@pytest.mark.parametrize("name", NAMES)
def test_a_link_planted_at_a_layout_name_is_never_followed(tmp_path, name):
    """Planted in an empty directory (the log is created around it), then in a log the
    scenario populated; the scenario must reach the name in one of them at least, or the
    probe could not fail."""
    reached = [plant_and_run(tmp_path / phase, name, populated=phase == "populated")
               for phase in ("empty", "populated")]
    assert any(reached), f"{name}: the scenario never reached the name"
