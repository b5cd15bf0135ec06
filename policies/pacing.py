"""Pacing deletion by bytes (`disk.delete_rate`): when a pass may remove the next bytes, how large a
truncation step is, and when the rate is not applied. Pure: the caller passes the time (a
monotonic clock) and does the waiting; see docs/concepts.md, "How fast".
"""

from __future__ import annotations

from collections.abc import Iterable

from policies.triggers import DISK_FORCE, REFUSE_WRITES

__all__ = ["BytePacer", "STEP_SECONDS", "MIN_STEP_BYTES", "MAX_STEP_BYTES", "step_bytes", "unpaced_reason"]

STEP_SECONDS = 0.25         # a truncation step frees a quarter second's bytes at the rate ...
MIN_STEP_BYTES = 1 << 20    # ... at least 1 MiB (smaller steps cost journal commits, not stalls)
MAX_STEP_BYTES = 64 << 20   # ... at most 64 MiB (RocksDB's bytes_max_delete_chunk)

# Why a deletion of a policy with a delete_rate went unpaced (the audit line's `unpaced`).
_UNPACED = {
    DISK_FORCE: "over force_ratio: delete_rate not applied",
    REFUSE_WRITES: "over refuse_writes_ratio: delete_rate not applied",
}


def step_bytes(rate: int) -> int:
    """The bytes one truncation step frees at `rate` bytes per second; a file no larger is unlinked
    whole."""
    return max(MIN_STEP_BYTES, min(MAX_STEP_BYTES, int(rate * STEP_SECONDS)))


def unpaced_reason(triggers: Iterable[str]) -> str | None:
    """Why a deletion under these triggers goes at full speed, or None when the rate holds: the disk
    is over force_ratio (or refuse_writes_ratio), where writers are refused or about to be."""
    found = set(triggers)
    return next((why for trigger, why in _UNPACED.items() if trigger in found), None)


class BytePacer:
    """A bucket over bytes removed, without burst: removing `n` bytes at `rate` takes `n / rate`
    seconds of the deletion timeline, which starts again at the present whenever it fell behind.
    Over any span from one removal to the next, the bytes removed before it stay within the rate.
    Not thread-safe: one pass uses it at a time."""

    def __init__(self) -> None:
        self._free_at: float | None = None   # the (monotonic) time the bytes spent so far are paid

    def spend(self, nbytes: int, rate: int, now: float) -> float:
        """Count `nbytes` removed at `now` at `rate` bytes per second; return the seconds to wait
        before the next removal."""
        start = now if self._free_at is None else max(self._free_at, now)
        self._free_at = start + nbytes / rate
        return self._free_at - now

    def due(self, now: float) -> float:
        """Seconds from `now` until what was spent is paid (0 when it is)."""
        return 0.0 if self._free_at is None else max(0.0, self._free_at - now)
