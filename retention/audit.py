"""The audit trail: one JSON line per deleted segment, appended and fsynced.

Data lost to disk pressure is never silent: each line names, per consumer group, the offsets the
group had not consumed. Thread-safe (a lock serialises appends); several processes may append to
one file (O_APPEND writes of one line each).
"""

from __future__ import annotations

import json
import os
import threading
from datetime import datetime, timezone


class AuditTrail:
    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        self._lock = threading.Lock()

    def record(self, entry: dict) -> None:
        line = (json.dumps(entry, sort_keys=False, separators=(",", ":")) + "\n").encode()
        with self._lock:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)


def deletion_entry(*, at: float, log: str, path: str, segment: str, base_offset: int,
                   end_offset: int, bytes: int, triggers: list[str], forced: bool,
                   overridden_by: str | None, unconsumed: list[tuple[str, int, int]],
                   pinned_by: list[dict] | None = None) -> dict:
    """The audit line of one deletion; `unconsumed` holds (group, first, end-exclusive) ranges."""
    return {
        "time": datetime.fromtimestamp(at, timezone.utc).isoformat(timespec="milliseconds"),
        "log": log,
        "path": path,
        "segment": segment,
        "base_offset": base_offset,
        "end_offset": end_offset,
        "bytes": bytes,
        "triggers": triggers,
        "forced": forced,
        "overridden_by": overridden_by,
        "unconsumed": [{"group": g, "first_offset": first, "end_offset": end}
                       for g, first, end in unconsumed],
        "pinned_by": pinned_by or [],
    }


def read_audit(path: str) -> list[dict]:
    """Every entry of an audit file (for tests and `retention status`)."""
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []
