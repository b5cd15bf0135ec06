"""The sidecar starts under every disk condition: started again and again on a real small filesystem
that is already above `force_ratio`, or above `refuse_writes_ratio`, every start serves `/healthz`
and deletes down to `force_target`.

Before the fix, the roll watch or the disk check could schedule a one-shot pressure pass (a job with
no interval) before the start-up line was logged, and formatting that line ended the process with
exit 1 (`TypeError: unsupported format string passed to NoneType.__format__`).
"""

from __future__ import annotations

import json
import os

import pytest

from commitlog import CommitLog, disk_usage

from retention_helpers import config_text, write_config
from sidecar_helpers import Sidecar

STARTS = 20
SEGMENT = 256 << 10
FORCE, REFUSE, TARGET = 0.45, 0.60, 0.30


def _config(audit, log_dir) -> str:
    """Only disk pressure deletes (nothing is an hour old), checked every second."""
    return config_text(sidecar=True, service={"audit": str(audit)},
                       log={"path": str(log_dir), "segment_size": "256KiB"},
                       policy={"files_per_pass": 100, "disk_check_interval": "1s",
                               "disk": {"clean_ratio": 0.40, "force_ratio": FORCE, "force_target": TARGET,
                                        "refuse_writes_ratio": REFUSE}})


def _fill(log_dir: str, mount: str, above: float) -> float:
    """Append 4 KiB records (no writer refusal: its own ratio is set past 1) until the filesystem
    is above `above`; returns the ratio reached."""
    record = os.urandom(4096)
    while disk_usage(mount).used_ratio <= above:   # measured closed: a closed writer gives back its spare segment
        with CommitLog.open(log_dir, segment_size=SEGMENT, flush="none", refuse_writes_ratio=0.99,
                            resume_ratio=0.98) as log:
            while disk_usage(mount).used_ratio <= above + 0.05:
                log.append_batch([record] * 8)
    return disk_usage(mount).used_ratio


def _deleted(audit: str) -> int:
    try:
        with open(audit) as f:
            return sum(1 for line in f if json.loads(line).get("event") == "deleted")
    except FileNotFoundError:
        return 0


@pytest.mark.parametrize("small_fs", [("tmpfs", 8 << 20)], indirect=True)
@pytest.mark.parametrize("above", [FORCE + 0.02, REFUSE + 0.02], ids=["above-force", "above-refuse-writes"])
def test_every_start_on_a_full_disk_serves_healthz_and_deletes(small_fs, tmp_path, above):
    log_dir, audit = os.path.join(small_fs, "log"), str(tmp_path / "audit.jsonl")
    path, _ = write_config(tmp_path, _config(audit, log_dir))
    for start in range(STARTS):
        reached = _fill(log_dir, small_fs, above)
        assert reached > above
        before = _deleted(audit)
        sidecar = Sidecar(path, cwd=tmp_path).start()      # fails if the process exits at start
        try:
            sidecar.wait_for(lambda: sidecar.request("GET", "/healthz")[0] == 200,
                             what=f"start {start}: /healthz 200")
            sidecar.wait_for(lambda: disk_usage(small_fs).used_ratio <= FORCE and _deleted(audit) > before,
                             what=f"start {start}: deletion below force_ratio (from {reached:.2f})")
            assert sidecar.proc.poll() is None, sidecar.log()
        finally:
            code = sidecar.stop()
        assert code == 0, f"start {start}: exit {code}\n{sidecar.log()}"
        assert "Traceback" not in sidecar.log(), sidecar.log()
