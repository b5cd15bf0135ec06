"""Pressure levels: how hard a filesystem presses, from its used ratio and the policies of its logs.

One pure function, :func:`pressure`, owns the clean/force/refuse thresholds for the scheduler (the
planner's triggers use the same rules through :mod:`policies.triggers`):

- ``clean`` above the lowest ``clean_ratio`` of the logs on the disk, ``force`` above a
  ``force_ratio``, ``refuse-writes`` above a ``refuse_writes_ratio``; each crossed strictly above.
- ``forcing``: passes run back to back. It starts above ``force_ratio`` with ``disk.force`` on
  (never with it off: above ``refuse_writes_ratio`` writers are refused instead), and once started it
  lasts while the ratio is above the ``force_target`` of a forcing policy (hysteresis: a pass limited
  by ``files_per_pass`` does not leave the disk between ``force_target`` and ``force_ratio``).

Pure and stateless (the previous ``forcing`` is an input), so thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from policies.config import DiskConfig
from policies.triggers import disk_forces, force_continues

__all__ = ["LEVEL_CLEAN", "LEVEL_FORCE", "LEVEL_NAMES", "LEVEL_OK", "LEVEL_REFUSE", "Pressure", "pressure"]

LEVEL_OK, LEVEL_CLEAN, LEVEL_FORCE, LEVEL_REFUSE = 0, 1, 2, 3
LEVEL_NAMES = {LEVEL_OK: "ok", LEVEL_CLEAN: "clean", LEVEL_FORCE: "force", LEVEL_REFUSE: "refuse-writes"}
"""The level names `/status` shows (the `retention_disk_pressure` gauge carries the number)."""


@dataclass(frozen=True)
class Pressure:
    """A filesystem's pressure at one reading. Immutable."""

    level: int
    """One of the ``LEVEL_*`` constants."""
    forcing: bool
    """Passes run back to back, each deleting unexpired segments down to ``force_target``."""

    @property
    def name(self) -> str:
        return LEVEL_NAMES[self.level]


def pressure(used_ratio: float, disks: Iterable[DiskConfig], *, forcing_before: bool = False) -> Pressure:
    """The pressure at ``used_ratio`` for a disk shared by logs with the ``disks`` settings.

    forcing_before: the previous reading was forcing; forcing then lasts down to ``force_target``.
    """
    disks = tuple(disks)
    refuse = any(used_ratio > d.refuse_writes_ratio for d in disks)
    forcing = any(disk_forces(d, used_ratio) for d in disks)
    if forcing_before and not forcing:
        forcing = any(force_continues(d, used_ratio) for d in disks)
    if refuse:
        level = LEVEL_REFUSE
    elif any(used_ratio > d.force_ratio for d in disks):
        level = LEVEL_FORCE
    elif any(used_ratio > d.clean_ratio for d in disks):
        level = LEVEL_CLEAN
    else:
        level = LEVEL_OK
    return Pressure(level, forcing)
