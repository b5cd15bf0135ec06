"""Helpers of the archive-tier probes (tests/adversary/test_archive_identity_*.py and
test_archive_pressure_*.py): a `file://` tier on a real mount that can go away and come back, a
sidecar configuration archiving one log, and what /healthz and the audit trail say."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "retention"))   # the shared builders

from retention_helpers import config_text, segment_bases, wait_for  # noqa: E402,F401
from sidecar_helpers import Sidecar  # noqa: E402,F401

from retention.audit import read_events  # noqa: E402

ALL_HOURS = list(range(24))


class MountedTier:
    """A tmpfs whose contents outlive its mount: it is mounted at a hidden `store`, bind-mounted at
    `mountpoint` (the tier's directory); `unmount()` leaves the bare, empty mountpoint (as an NFS
    mount or a second disk that went away), `remount()` brings the same contents back."""

    def __init__(self, size: int = 64 << 20) -> None:
        self.store = tempfile.mkdtemp(prefix="tier-store-")
        self.mountpoint = tempfile.mkdtemp(prefix="tier-")
        _run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", self.store])
        self.remount()

    @property
    def url(self) -> str:
        return f"file://{self.mountpoint}/archive"

    def remount(self) -> None:
        _run(["mount", "--bind", self.store, self.mountpoint])

    def unmount(self) -> None:
        _run(["umount", self.mountpoint])

    def close(self) -> None:
        for path in (self.mountpoint, self.store):
            subprocess.run(["umount", "-l", path], capture_output=True)
            subprocess.run(["rm", "-rf", "--one-file-system", path], capture_output=True)


def _run(args: list[str]) -> None:
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {proc.stderr.strip()}")


def sidecar_config(tmp: Path, archive: dict, *, policy: dict | None = None) -> Path:
    """A sidecar's configuration for log `staging` (4 KiB segments) archiving to `archive`:
    passes every second at any hour, segments expired a second after their last write (so an
    archived one is evicted at once), uploads every second."""
    path = tmp / "retention.yaml"
    path.write_text(config_text(tmp, sidecar=True, policy={
        "interval": "1s", "reserve": "1s", "delete_at_hours": ALL_HOURS,
        "archive": {"interval": "1s", "retry_after": "1s", "max_retry_after": "1s", **archive},
        **(policy or {})}))
    return path


def health(sidecar: Sidecar) -> tuple[int, list[tuple[str, str | None]]]:
    """/healthz: its status and its (problem, log) pairs."""
    status, body = sidecar.get_json("/healthz")
    return status, [(d["problem"], d["log"]) for d in body.get("details", ())]


def passes(sidecar: Sidecar) -> int:
    """Passes the sidecar completed, whatever started them (its /metrics)."""
    body = sidecar.request("GET", "/metrics")[2].decode()
    return int(sum(float(line.rsplit(" ", 1)[1]) for line in body.splitlines()
                   if line.startswith("retention_passes_total{")))


def after_passes(sidecar: Sidecar, count: int) -> None:
    """Return once `count` more passes completed."""
    target = passes(sidecar) + count
    sidecar.wait_for(lambda: passes(sidecar) >= target, timeout=60, what=f"{count} more passes")


def deletions(tmp: Path) -> list[dict]:
    """The `deleted` outcomes of the audit trail."""
    audit = tmp / "audit.jsonl"
    return [e for e in read_events(str(audit)) if e["event"] == "deleted"] if audit.exists() else []
