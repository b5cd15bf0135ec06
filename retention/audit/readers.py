"""Reading an audit file as it is on disk: every well-formed line, the last ones of a long file,
the deletions (torn lines, from a crash or a full disk mid-write, are skipped). Stateless.
"""

from __future__ import annotations

import json
import os

from policies import DELETED

__all__ = ["read_audit", "read_events", "read_tail"]

_TAIL_BYTES = 4 << 20      # what `read_tail` reads of a long trail


def read_events(path: str) -> list[dict]:
    """Every well-formed line of an audit file, intents and outcomes, skipping torn lines."""
    out = []
    try:
        with open(path, "rb") as f:
            for raw in f:
                try:
                    entry = json.loads(raw)
                except ValueError:
                    continue  # a torn line (crash or full disk mid-write) or a fragment
                if isinstance(entry, dict):
                    out.append(entry)
    except FileNotFoundError:
        return []
    return out


def read_tail(path: str, size: int = _TAIL_BYTES) -> list[dict]:
    """The well-formed lines among the last `size` bytes of an audit file (a cut first line and torn
    lines skipped); [] when it cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            start = max(0, f.tell() - size)
            f.seek(start)
            data = f.read(size)
    except OSError:
        return []
    if start:
        data = data[data.find(b"\n") + 1:]
    out = []
    for raw in data.splitlines():
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        if isinstance(entry, dict):
            out.append(entry)
    return out


def read_audit(path: str) -> list[dict]:
    """Every deletion in an audit file (for tests and `retention status`): `deleted` lines, and lines
    from before intents existed; torn lines are skipped."""
    return [e for e in read_events(path) if e.get("event", DELETED) == DELETED]
