"""What a compaction pass did (or, dry, would do): per log its outputs, and the pass as a whole.

`CompactionResult.to_json_dict()` is the object `retention compact --json` prints and `POST /compact`
answers (docs/concepts.md, "Compaction")::

    {"at", "logs": [{"name", "path", "outputs": [{"segment", "inputs": [...], "bytes_before",
     "bytes_after", "dropped": {"dead", "superseded", "tombstone"}}], "reclaimed_bytes"}]}

A few keys beside the contract's tell a reader what it is looking at: `dry_run`, `interrupted` (the
time budget or a stop ended the pass between two outputs) and per log `error` and `planned`
(outputs the plan held; fewer were done when the pass stopped early). `render_compaction` is the
table printed without `--json`.

Plain data, filled by one pass in one thread and read-only after it returned.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from commitlog import segment_name
from policies import CAUSES, humanize_size, plural

__all__ = ["CompactionResult", "LogCompaction", "OutputResult", "render_compaction", "render_output"]


@dataclass(frozen=True)
class OutputResult:
    """One output file of a pass. `segment`: its base offset, None when nothing was live (the inputs
    went, their offsets became a gap); `inputs`: base offsets of the segments it replaced;
    `bytes_before`/`bytes_after`: the inputs' and the output's file bytes; `dropped`: records
    dropped by cause; [`first_offset`, `end_offset`): the offsets it covers (what left lies there)."""

    segment: int | None
    inputs: tuple[int, ...]
    bytes_before: int
    bytes_after: int
    dropped: dict[str, int]
    first_offset: int
    end_offset: int

    @property
    def reclaimed_bytes(self) -> int:
        return self.bytes_before - self.bytes_after

    def to_json_dict(self) -> dict:
        return {
            "segment": None if self.segment is None else segment_name(self.segment),
            "inputs": [segment_name(b) for b in self.inputs],
            "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
            "dropped": {cause: self.dropped.get(cause, 0) for cause in CAUSES},
        }


@dataclass
class LogCompaction:
    """One log's part of a pass."""

    name: str
    path: str
    outputs: list[OutputResult] = field(default_factory=list)
    planned: int = 0
    error: str | None = None

    @property
    def reclaimed_bytes(self) -> int:
        return sum(o.reclaimed_bytes for o in self.outputs)

    def to_json_dict(self) -> dict:
        return {"name": self.name, "path": self.path,
                "outputs": [o.to_json_dict() for o in self.outputs],
                "reclaimed_bytes": self.reclaimed_bytes, "planned": self.planned, "error": self.error}


@dataclass
class CompactionResult:
    """A whole pass over some logs."""

    at: datetime
    logs: list[LogCompaction]
    dry_run: bool = False
    duration: float = 0.0
    interrupted: bool = False

    @property
    def reclaimed_bytes(self) -> int:
        return sum(log.reclaimed_bytes for log in self.logs)

    @property
    def outputs(self) -> int:
        return sum(len(log.outputs) for log in self.logs)

    @property
    def failed(self) -> bool:
        return any(log.error for log in self.logs)

    def to_json_dict(self) -> dict:
        return {"at": self.at.isoformat(), "dry_run": self.dry_run, "interrupted": self.interrupted,
                "duration_seconds": round(self.duration, 6), "logs": [log.to_json_dict() for log in self.logs]}


def _dropped(d: dict[str, int]) -> str:
    return " ".join(f"{cause} {d.get(cause, 0)}" for cause in CAUSES)


def render_output(log: str, output: OutputResult, *, dry_run: bool = False) -> str:
    """One line for one output (the CLI's progress line on a terminal)."""
    target = "(nothing live: a gap)" if output.segment is None else segment_name(output.segment)
    verb = "would replace" if dry_run else "replaced"
    return (f"{log}: {target} {verb} {plural(len(output.inputs), 'segment')}, {humanize_size(output.bytes_before)}"
            f" -> {humanize_size(output.bytes_after)}; dropped {_dropped(output.dropped)}")


def render_compaction(data: dict) -> str:
    """The readable report of a ``CompactionResult.to_json_dict()``: a table of outputs per log, and a total."""
    lines = [f"compaction {'plan (dry run)' if data['dry_run'] else 'pass'} at {data['at']}"]
    total = outputs = 0
    for log in data["logs"]:
        lines.append(f"\n{log['name']} ({log['path']})")
        if log["error"]:
            lines.append(f"  error: {log['error']}")
        if not log["outputs"]:
            lines.append("  nothing to compact" if not log["error"] else "  no output")
            continue
        lines.append(f"  {'OUTPUT':<24} {'INPUTS':>6} {'BEFORE':>10} {'AFTER':>10}  DROPPED")
        for o in log["outputs"]:
            lines.append(f"  {o['segment'] or '(gap)':<24} {len(o['inputs']):>6} {humanize_size(o['bytes_before']):>10} "
                         f"{humanize_size(o['bytes_after']):>10}  {_dropped(o['dropped'])}")
        if log["planned"] > len(log["outputs"]):
            lines.append(f"  {plural(log['planned'] - len(log['outputs']), 'planned output')} left for the next pass")
        lines.append(f"  reclaimed {humanize_size(log['reclaimed_bytes'])}")
        total += log["reclaimed_bytes"]
        outputs += len(log["outputs"])
    verb = "would reclaim" if data["dry_run"] else "reclaimed"
    lines.append(f"\n{verb} {humanize_size(total)} in {plural(outputs, 'output')}"
                 + (" (stopped early: time budget or stop)" if data["interrupted"] else ""))
    return "\n".join(lines) + "\n"
