"""The clock guard's rules: what a forward step of the wall clock is, and what waits after one.

The retention side keeps a *trusted now* (the wall time before a step plus the time elapsed since
on a clock the step does not move) so that a clock stepped a year ahead cannot make every segment
expired and every group stale; these functions decide with it:

- :func:`forward_step`: the wall clock ahead of the trusted time by more than the threshold.
- :func:`judged_at`: the instant expiry and group staleness are judged at (the trusted now when
  given and earlier than ``now``, else ``now``).
- :func:`start_reference` and :func:`held_trusted`: at start, where the clock should be and the
  trusted now of a hold the last :class:`ClockMark` says was held (exact on the same boot).
- :func:`age_reason`: ``reserved`` or ``clock-step``; both yield to what overrides ``reserved``.

Why, and what is exact when: docs, Operations, "A forward clock step". Pure (every time is an
input), so thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from policies.reasons import CLOCK_STEP, RESERVED
from policies.units import humanize_duration

__all__ = ["ClockMark", "age_reason", "clock_step_detail", "forward_step", "held_trusted", "judged_at",
           "start_reference"]


@dataclass(frozen=True)
class ClockMark:
    """Where the clock was at a look: wall epoch seconds (the trusted time while a step is held),
    seconds since boot, the kernel's boot id; ``step``: the seconds the wall clock was ahead of
    ``wall`` when a step was held, None when none was."""

    wall: float
    uptime: float
    boot_id: str
    step: float | None = None


def forward_step(trusted: float, wall: float, threshold: float) -> float | None:
    """The seconds the wall clock ``wall`` is ahead of ``trusted`` (epoch seconds) when that is more
    than ``threshold``, else None."""
    step = wall - trusted
    return step if step > threshold else None


def start_reference(mark: ClockMark | None, boot_id: str | None, uptime: float,
                    newest: float | None) -> tuple[float | None, bool]:
    """``(reference, exact)``: the epoch time the wall clock should read at start, given the last
    ``mark``, this boot's ``boot_id`` and boot clock ``uptime``, and the ``newest`` time on disk.
    ``exact`` when ``mark`` is of this boot (a boot clock that went back is another boot); else the
    newest of the mark's wall time and ``newest`` (None: nothing known)."""
    if mark is not None and boot_id is not None and mark.boot_id == boot_id and uptime >= mark.uptime:
        return mark.wall + (uptime - mark.uptime), True
    known = [t for t in (None if mark is None else mark.wall, newest) if t is not None]
    return (max(known) if known else None), False


def held_trusted(mark: ClockMark | None, boot_id: str | None, uptime: float) -> float | None:
    """The trusted now of the hold ``mark`` records (None: it records none), given this boot's
    ``boot_id`` and boot clock ``uptime`` (see the module docstring)."""
    if mark is None or mark.step is None:
        return None
    if boot_id is not None and mark.boot_id == boot_id and uptime >= mark.uptime:
        return mark.wall + (uptime - mark.uptime)
    return mark.wall


def judged_at(now: datetime, trusted: datetime | None) -> datetime:
    """The instant expiry and staleness are judged at: ``trusted`` when given and before ``now``."""
    return trusted if trusted is not None and trusted < now else now


def age_reason(age_judged: float, age_now: float, reserve: float) -> str | None:
    """The reason a segment ``age_judged`` seconds old at the judged instant (``age_now`` by the wall
    clock) is kept for its age, or None when it is expired by both."""
    if age_judged >= reserve:
        return None
    return CLOCK_STEP if age_now >= reserve else RESERVED


def clock_step_detail(step: float, age: float) -> str:
    """The words of ``clock-step``: how far the wall clock is ahead, and the segment's trusted age."""
    return f"the wall clock is {humanize_duration(step)} ahead of the trusted time, {humanize_duration(age)} old by it"
