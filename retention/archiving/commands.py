"""`retention archive status|upload|verify`: the archive tier of every configured log that has one,
from a configuration file, without a sidecar.

- `status`: per log, its tier, what the manifest lists (segments, bytes, offsets), the upload lag.
- `upload`: one upload run per log now (what the sidecar's job does; a log a running sidecar owns
  is left to it, and said so).
- `verify`: every archived object checked against the manifest: present, its size, its SHA-256
  (the tier's stored checksum, or the object read and hashed); exit status 1 on any problem, a tier
  that cannot prove it is the log's (`commitlog.archive.identity`) included.
- `forget` (named logs only): drop what this host remembers of the tier (`LogArchive.forget`), for
  a tier gone for good: the next upload takes it as new and archives every local segment again.

Each returns the JSON object the command prints with `--json`; `render` makes the text.
"""

from __future__ import annotations

import time

from commitlog import ArchiveError, CommitLogError
from policies import RetentionConfig, humanize_duration, humanize_size, plural
from prometheus_client import CollectorRegistry

from ..audit import AuditTrail
from .archive_metrics import ArchiveMetrics
from .archiver import Archiver

__all__ = ["archive_command", "render"]


def archive_command(action: str, config: RetentionConfig, logs: list[str]) -> dict:
    """Run `action` (status, upload, verify) over the configured logs with an archive (only `logs`
    when given); the result's `failed` is true when any log failed."""
    unknown = sorted(set(logs) - set(config.logs))
    if unknown:
        raise ValueError(f"--log: no configured log named {', '.join(unknown)}")
    if action == "forget" and not logs:
        raise ValueError("--log: forget names the logs whose tier is gone for good")
    archiver = Archiver(ArchiveMetrics(CollectorRegistry()))
    archiver.sync(config, AuditTrail(str(config.service.audit)))
    try:
        out = {}
        for name, uploader in archiver.uploaders().items():
            if logs and name not in logs:
                continue
            entry = {"url": uploader.archive.tier.url}
            try:
                if action == "upload":
                    entry["uploaded"] = archiver.upload(name)
                    entry.update(_state(uploader.state))
                elif action == "verify":
                    entry.update(_verify(uploader))
                elif action == "forget":
                    entry["forgot"] = uploader.archive.forget()
                else:
                    uploader.look()
                    entry.update(_state(uploader.state))
                manifest = uploader.archive.cached_manifest()
                if manifest is not None:
                    entry.update(start_offset=manifest.start_offset, end_offset=manifest.end_offset)
            except (ArchiveError, CommitLogError, OSError) as exc:
                entry["error"] = str(exc)
            if uploader.state.owned_elsewhere:
                entry["error"] = uploader.state.owned_elsewhere
            out[name] = entry
    finally:
        archiver.close()
    failed = any(e.get("error") or e.get("problems") or e.get("missing") for e in out.values())
    return {"action": action, "logs": out, "failed": failed}


def _state(state) -> dict:
    return {"archived_segments": state.archived_segments, "archived_bytes": state.archived_bytes,
            "lag_seconds": round(state.lag_seconds, 3), "lag_bytes": state.lag_bytes,
            **({"error": state.last_error} if state.last_error else {}),
            **({"missing": state.missing} if state.missing else {})}


def _verify(uploader) -> dict:
    started = time.monotonic()
    doubt = uploader.archive.doubt()      # a tier gone is no empty tier whose objects all match
    manifest = uploader.archive.manifest()
    problems = [doubt] if doubt else \
        [problem for segment in manifest.segments for problem in uploader.archive.verify(segment)]
    return {"archived_segments": len(manifest.segments), "archived_bytes": sum(s.bytes for s in manifest.segments),
            "problems": problems, "seconds": round(time.monotonic() - started, 3)}


def render(data: dict) -> str:
    """The text of an `archive` command's result."""
    lines = []
    if not data["logs"]:
        lines.append("no configured log has an archive (archive.url)")
    for name, entry in data["logs"].items():
        head = f"{name}: {entry['url']}"
        if "archived_segments" in entry:
            head += f", {entry['archived_segments']} segments ({humanize_size(entry['archived_bytes'])}) archived"
        if "start_offset" in entry:
            head += f", offsets [{entry['start_offset']}, {entry['end_offset']})"
        lines.append(head)
        if "forgot" in entry:
            lines.append("  forgotten: the next upload takes the tier as new" if entry["forgot"] else
                         "  nothing remembered of it here")
        if "uploaded" in entry:
            lines.append(f"  uploaded now: {entry['uploaded']}")
        if "lag_seconds" in entry:
            lines.append(f"  upload lag: {humanize_duration(entry['lag_seconds'])}, "
                         f"{humanize_size(entry['lag_bytes'])} waiting")
        if "problems" in entry:
            lines.append(f"  verified in {entry['seconds']:.2f}s: "
                         + ("every object matches the manifest" if not entry["problems"] else
                            plural(len(entry["problems"]), "problem")))
            lines.extend(f"  problem: {problem}" for problem in entry["problems"])
        if entry.get("missing"):
            lines.append(f"  archive missing: {entry['missing']}")
        if entry.get("error"):
            lines.append(f"  error: {entry['error']}")
    return "\n".join(lines)
