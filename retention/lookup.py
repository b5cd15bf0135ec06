"""Lookup by time over the configured logs: for each, the first offset written at or after a
time (`CommitLog.offset_for_time`), beside its start and end offsets. What `retention offsets
--at TIME` prints and `GET /offsets?at=TIME` answers: where a consumer should start to replay
from a point in time.

Each log is opened read-only for the question and closed after it; a log that cannot be opened
(missing, not a log, unreadable) gets its error in its place and the others still answer.
Thread-safe: nothing is shared between calls.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from commitlog import CommitLog, CommitLogError
from policies import RetentionConfig

__all__ = ["UnknownLogError", "offsets_at", "parse_time", "render_offsets"]


class UnknownLogError(ValueError):
    """A log name the configuration does not define."""


def parse_time(text: str, what: str = "--at") -> datetime:
    """An ISO 8601 time (naive: the machine's local time); ValueError naming `what` otherwise."""
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{what}: expected an ISO 8601 time like 2026-11-21T04:30:00+01:00, "
                         f"got {text[:80]!r}") from None
    return at if at.tzinfo is not None else at.astimezone()


def offsets_at(config: RetentionConfig, at: datetime, names: Iterable[str] = ()) -> dict:
    """{"at", "timestamp_ms", "logs": {name: {"offset", "start_offset", "end_offset"} or
    {"error"}}} for the logs `names` (every configured log when empty); "offset" is None when
    nothing that late is written yet. UnknownLogError for a name not configured. A name given
    twice is asked once: the work is bounded by the configured logs, whatever the request repeats."""
    wanted = list(dict.fromkeys(names)) or list(config.logs)
    unknown = [name for name in wanted if name not in config.logs]
    if unknown:
        raise UnknownLogError(f"no log named {unknown[0]!r} in the configuration; "
                              f"configured: {', '.join(sorted(config.logs)) or 'none'}")
    timestamp_ms = round(at.timestamp() * 1000)
    logs: dict[str, dict] = {}
    for name in wanted:
        try:
            with CommitLog.open(config.logs[name].path, readonly=True) as log:
                logs[name] = {"offset": log.offset_for_time(timestamp_ms),
                              "start_offset": log.start_offset, "end_offset": log.end_offset}
        except (CommitLogError, OSError) as exc:
            logs[name] = {"error": str(exc)}
    return {"at": at.isoformat(), "timestamp_ms": timestamp_ms, "logs": logs}


def render_offsets(answer: dict) -> str:
    """The text `retention offsets` prints: a line per log."""
    lines = [f"offsets at {answer['at']}:"]
    for name, log in answer["logs"].items():
        if "error" in log:
            lines.append(f"  {name}: error: {log['error']}")
        elif log["offset"] is None:
            lines.append(f"  {name}: nothing written that late yet (end {log['end_offset']})")
        else:
            lines.append(f"  {name}: offset {log['offset']} (kept {log['start_offset']}..{log['end_offset']})")
    return "\n".join(lines)
