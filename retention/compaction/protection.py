"""The interface through which integrations protect records from compaction, so the engine knows
none of them: a *protector* is any object with

- `name`: a short name for messages;
- `pending_ranges(log_path) -> Iterable[(start, end)]`: offset ranges a compaction must keep
  whole, whatever else holds (records an unfinished job may still make visible);
- `keyed_compaction_refusal(log_path) -> str | None`: why the log must not be compacted as keyed;
- `decided_in_log_directory` (optional, False when absent): True when both answers are decided
  by files in the log directory alone, so that a log whose directory no event touched since its
  last look has the same answers (a compaction job then need not ask them: `look_memory`).

Protectors are found through the entry points of the group `commitlog_retention.protectors` (the
Spark integration declares `spark = commitlog.spark.protector:PROTECTOR`), loaded once per
process. A protector that fails to load or raises fails the log's compaction: without its ranges
nothing is known to be safe to drop. Thread-safe (the discovery is guarded by a lock).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from importlib.metadata import entry_points
from typing import Protocol

__all__ = ["ENTRY_POINT_GROUP", "Protector", "installed_protectors", "keyed_refusal", "pending_of"]

ENTRY_POINT_GROUP = "commitlog_retention.protectors"

_lock = threading.Lock()
_loaded: list | None = None


class Protector(Protocol):
    name: str

    def pending_ranges(self, log_path: str) -> Iterable[tuple[int, int]]: ...

    def keyed_compaction_refusal(self, log_path: str) -> str | None: ...

    # decided_in_log_directory: bool (optional; see the module docstring)


def installed_protectors() -> list[Protector]:
    """Every protector the installed distributions declare, loaded on the first call.
    RuntimeError naming the entry point when one cannot be loaded."""
    global _loaded
    with _lock:
        if _loaded is None:
            found = []
            for point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda p: p.name):
                try:
                    found.append(point.load())
                except Exception as exc:  # noqa: BLE001 (named, then every compaction fails)
                    raise RuntimeError(f"the compaction protector {point.name} ({point.value}) "
                                       f"cannot be loaded: {exc}") from exc
            _loaded = found
        return list(_loaded)


def pending_of(protectors: Sequence[Protector]) -> Callable[[str], list[tuple[int, int]]]:
    """A `pending(log_path)` hook: the ranges of every protector, as one sorted list."""
    def pending(log_path: str) -> list[tuple[int, int]]:
        return sorted(r for p in protectors for r in p.pending_ranges(log_path))
    return pending


def keyed_refusal(protectors: Sequence[Protector], log_path: str) -> str | None:
    """The first protector's reason not to compact `log_path` as keyed, or None."""
    for p in protectors:
        reason = p.keyed_compaction_refusal(log_path)
        if reason:
            return reason
    return None
