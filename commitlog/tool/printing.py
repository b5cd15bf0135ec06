"""How the `commitlog` command prints: JSON documents and lines, times as ISO 8601 UTC, and text
tables. Pure functions but `emit`."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone

__all__ = ["emit", "iso_ms", "iso_s", "table"]


def iso_ms(ms: int | None) -> str | None:
    """Epoch milliseconds as an ISO 8601 UTC time with milliseconds (None stays None)."""
    if ms is None:
        return None
    try:
        return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds") \
            .replace("+00:00", "Z")
    except (OverflowError, ValueError, OSError):
        return f"{ms} ms (out of range)"


def iso_s(seconds: float | None) -> str | None:
    """Epoch seconds as iso_ms does."""
    return None if seconds is None else iso_ms(round(seconds * 1000))


def emit(data: dict, render, as_json: bool) -> None:
    """Print `data` as indented JSON, or the text `render(data)` gives; a final newline either way."""
    text = json.dumps(data, indent=2) if as_json else render(data)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


def table(header: list[str], rows: list[list[object]]) -> list[str]:
    """Left-aligned columns, two spaces apart; None prints as "-"."""
    cells = [header] + [["-" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
