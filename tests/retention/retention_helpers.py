"""Builders shared by the retention tests: real logs with small segments, configs on disk."""

from __future__ import annotations

import copy
import os
import textwrap
import time
from pathlib import Path

import yaml

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


def wait_for(predicate, what: str = "condition", *, timeout: float = 30.0):
    """`predicate()`'s first true value, polled every 50 ms; AssertionError naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def manual_pass(config):
    """The result of one manual pass of a new Cleaner over `config` (closed after)."""
    from retention import Cleaner
    cleaner = Cleaner(config)
    try:
        cleaner.trigger_manual()
        return cleaner.run_pass()
    finally:
        cleaner.close()


def write_config(tmp: Path, body: str, name: str = "retention.yaml"):
    path = tmp / name
    path.write_text(textwrap.dedent(body))
    return path, load_config(path, base_dir=tmp)


# The setup most retention tests share: one log `staging` of 4 KiB segments, an audit file, and a
# default policy keeping an hour, with no delete hours (only a manual pass or disk pressure
# deletes), ten files a pass without a pause.
BASE_CONFIG = {
    "service": {"audit": "audit.jsonl"},
    "logs": {"staging": {"path": "staging", "segment_size": "4KiB"}},
    "policies": {"default": {"delete_at_hours": [], "reserve": "1h", "files_per_pass": 10,
                             "pause_between_files": "0ms"}},
}
SIDECAR_SERVICE = {"listen": "127.0.0.1:0"}   # the kernel picks the port; Sidecar reads it
SIDECAR_POLICY = {"interval": "1h"}


def config_text(tmp: Path | None = None, *, sidecar: bool = False, service: dict | None = None,
                logs: dict | None = None, policy: dict | None = None, log: dict | None = None) -> str:
    """The YAML of BASE_CONFIG with overrides: `service` and `policy` (the default policy) merge
    key by key, nested dicts such as `disk` too; `log` merges into the `staging` log's keys;
    `logs` replaces the log table. With `tmp`, the audit file and the log's path are absolute
    under it. `sidecar`: a service listening on loopback, passes hourly unless `policy` says."""
    config = copy.deepcopy(BASE_CONFIG)
    if tmp is not None:
        config["service"]["audit"] = str(Path(tmp) / "audit.jsonl")
        config["logs"]["staging"]["path"] = str(Path(tmp) / "staging")
    if sidecar:
        _merge(config["service"], SIDECAR_SERVICE)
        _merge(config["policies"]["default"], SIDECAR_POLICY)
    _merge(config["service"], service or {})
    _merge(config["logs"]["staging"], log or {})
    if logs is not None:
        config["logs"] = logs
    _merge(config["policies"]["default"], policy or {})
    return yaml.safe_dump(config, sort_keys=False)


def _merge(into: dict, changes: dict) -> None:
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)
