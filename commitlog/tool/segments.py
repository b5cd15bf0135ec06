"""`commitlog segments PATH`: each segment of a log with its offsets, bytes, timestamps, state
(active or sealed; short: a sealed file smaller than the segment size, cut by a time-based roll
or written by a compaction; archived: listed whole in the log's copy of its archive manifest,
commitlog.archive.cached_manifest, no tier asked) and live ratio (the share of its bytes not
marked dead, commitlog.marks)."""

from __future__ import annotations

import os

from ..archive.log_archive import cached_manifest
from ..log import CommitLog
from .printing import iso_ms, table

__all__ = ["describe_segments", "render_segments"]


def describe_segments(log: CommitLog) -> dict:
    """{"log", "segment_size", "start_offset", "end_offset", "archive", "segments": [...]}."""
    manifest = cached_manifest(log.path, os.path.basename(log.path))
    rows = []
    for s in log.segments():
        end = s.end_offset
        ratio = s.live_ratio
        rows.append({
            "file": os.path.basename(s.path), "base_offset": s.base_offset, "end_offset": end,
            "bytes": s.size, "used_bytes": s.used_bytes,
            "first_timestamp": iso_ms(s.first_timestamp_ms), "last_timestamp": iso_ms(s.last_timestamp_ms),
            "first_timestamp_ms": s.first_timestamp_ms, "last_timestamp_ms": s.last_timestamp_ms,
            "state": "active" if s.active else "sealed", "short": not s.active and s.size < log.segment_size,
            "archived": manifest is not None and manifest.covers(s.base_offset, end),
            "live_bytes": s.live_bytes, "live_ratio": None if ratio is None else round(ratio, 4)})
    archive = None if manifest is None else {
        "segments": len(manifest.segments), "start_offset": manifest.start_offset,
        "end_offset": manifest.end_offset}
    return {"log": log.path, "segment_size": log.segment_size, "start_offset": log.start_offset,
            "end_offset": log.end_offset, "archive": archive, "segments": rows}


def _state(row: dict) -> str:
    return ",".join([row["state"]] + [word for word in ("short", "archived") if row[word]])


def render_segments(data: dict) -> str:
    n = len(data["segments"])
    lines = [f"log {data['log']}: offsets [{data['start_offset']}, {data['end_offset']}), "
             f"{n} segment{'s' if n != 1 else ''} of {data['segment_size']} bytes"]
    archive = data["archive"]
    lines.append("archive: no manifest copy (never archived from this host)" if archive is None else
                 f"archive: the manifest copy lists {archive['segments']} segments, offsets "
                 f"[{archive['start_offset']}, {archive['end_offset']})")
    rows = [[r["file"], r["base_offset"], r["end_offset"], r["bytes"], r["used_bytes"],
             r["first_timestamp"], r["last_timestamp"], _state(r),
             None if r["live_ratio"] is None else f"{r['live_ratio']:.3f}"] for r in data["segments"]]
    lines += table(["file", "base", "end", "bytes", "used", "first", "last", "state", "live"], rows)
    return "\n".join(lines)
