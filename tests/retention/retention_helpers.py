"""Builders shared by the retention tests: real logs with small segments, configs on disk."""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path

from commitlog import CommitLog
from policies import load_config

SEGMENT = 4096
RECORD = b"r" * 100          # 121 bytes framed: 33 records per 4 KiB segment


def make_log(path: Path, segments: int, *, segment_size: int = SEGMENT, record: bytes = RECORD) -> list[int]:
    """A log at `path` with `segments` full segments plus an active one; returns every base offset."""
    with CommitLog.open(path, segment_size=segment_size, flush="none") as log:
        while len(log.segments()) < segments + 1:
            log.append_batch([record] * 16)
        return [s.base_offset for s in log.segments()]


def set_age(log_dir: Path, base_offsets, age_seconds: float, now: float | None = None) -> None:
    """Make segments look last written `age_seconds` ago (the store keeps mtime = last write)."""
    t = (now or time.time()) - age_seconds
    for base in base_offsets:
        os.utime(log_dir / f"{base:020d}.log", (t, t))


def segment_bases(log_dir: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in log_dir.glob("*.log") if p.name[:20].isdigit() and p.is_file()
                  and not p.is_symlink())


def write_config(tmp: Path, body: str, name: str = "retention.yaml"):
    path = tmp / name
    path.write_text(textwrap.dedent(body))
    return path, load_config(path, base_dir=tmp)
