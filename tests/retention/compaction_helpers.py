"""Builders for the compaction tests: real logs with 4 KiB segments, records marked dead, configs."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from commitlog import CommitLog
from commitlog.layout import RETENTION_LOCK_FILE
from commitlog.record import LENGTH_SIZE
from retention.compaction.compactor import Compactor

from retention_helpers import write_config

SEGMENT = 4096
VALUE = b"v" * 100

CONFIG = """
service:
  listen: 127.0.0.1:0
  audit: {audit}{token}
logs:
  a:
    path: {log}
    segment_size: {segment_size}
policies:
  default:
    interval: 1h
    delete_at_hours: []
    compaction:
{compaction}
"""


def compaction_config(tmp: Path, log: Path, *, token: str | None = None, segment_size: str = "4KiB",
                      **compaction):
    """A config for one log `a` at `log` (a sidecar listening on a free loopback port, with
    `token`); `compaction` settings as YAML values (strings or numbers)."""
    body = "\n".join(f"      {k}: {v}" for k, v in compaction.items()) or "      enabled: true"
    return write_config(tmp, CONFIG.format(audit=tmp / "audit.jsonl", log=log, compaction=body,
                                           token=f"\n  token: {token}" if token else "",
                                           segment_size=segment_size))


def planned_is_what_is_written(config, at: float) -> int:
    """Run a dry run and then the pass at `at`; every output's planned size is its written size
    (less the end marker): the plan counts what each run of dropped offsets costs. The outputs
    done."""
    c = Compactor(config, clock=lambda: at)
    planned = [(o.segment, o.bytes_after) for o in c.run(dry_run=True).logs[0].outputs]
    c.close()
    c = Compactor(config, clock=lambda: at)
    written = [(o.segment, o.bytes_after - (LENGTH_SIZE if o.bytes_after else 0))
               for o in c.run().logs[0].outputs]
    c.close()
    assert written == planned, (written, planned)
    return len(written)


def dead_log(path: Path, sealed: int = 4, *, keep_every: int = 3,
             fully_dead: tuple[int, ...] = ()) -> list[tuple[int, bytes]]:
    """A log with `sealed` full segments plus an active one, every record not a multiple of
    `keep_every` marked dead, and every record of the segments at positions `fully_dead` (0 the
    oldest); returns the live (offset, value) pairs, as a scan gives them."""
    with CommitLog.open(path, segment_size=SEGMENT, flush="none") as log:
        i = 0
        while len(log.segments()) < sealed + 1:
            log.append(VALUE + str(i).encode())
            i += 1
        spans = [(s.base_offset, s.end_offset) for n, s in enumerate(log.segments()) if n in fully_dead]
        log.mark_dead([o for o in range(log.end_offset) if o % keep_every or any(b <= o < e for b, e in spans)])
        return [(r.offset, r.value) for r in log.scan()]


def scan_pairs(path: Path) -> list[tuple[int, bytes]]:
    with CommitLog.open(path, readonly=True) as log:
        return [(r.offset, bytes(r.value)) for r in log.scan()]


def dir_bytes(path: Path) -> int:
    """Bytes of the segment files in `path`; a file a running compaction swaps away between the
    listing and its stat counts as gone."""
    total = 0
    for p in Path(path).glob("*.log"):
        try:
            total += p.stat().st_size
        except FileNotFoundError:
            pass
    return total


def digest_tree(root: Path) -> dict[str, str]:
    """Every file under `root` -> sha256 of its bytes (and its size); the retention owner's lock
    file, which a pass creates to own the log, is not the log's data, nor are a SQLite
    database's `-shm` (an index of its `-wal`) and an empty `-wal`, which a read-only read of
    the database leaves in place."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            p = Path(dirpath) / name
            if name == RETENTION_LOCK_FILE or name.endswith("-shm") or (name.endswith("-wal") and not p.stat().st_size):
                continue
            out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out
