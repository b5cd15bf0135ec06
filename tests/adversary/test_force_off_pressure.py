"""`disk.force: false` keeps its promise on a real full disk: past `refuse_writes_ratio` a real
sidecar deletes only expired, consumed segments and the writer is refused instead.

Before the fix `refuse-writes` forced deletion whatever `disk.force` said, down to `force_target`:
the unexpired segments and those `etl` had not consumed went at the sidecar's first pass.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from clock_helpers import age, audit_events, commit, fill_to, segment_end
from commitlog import CommitLog, StoreFullError, disk_usage
from retention_helpers import config_text, segment_bases, write_config
from sidecar_helpers import Sidecar

SEGMENT = 256 << 10
CLEAN, FORCE, REFUSE = 0.40, 0.45, 0.60


@pytest.mark.parametrize("small_fs", [("tmpfs", 8 << 20)], indirect=True)
def test_a_full_disk_with_force_off_deletes_only_expired_consumed_segments_and_refuses_the_writer(small_fs, tmp_path):
    log_dir, audit = os.path.join(small_fs, "log"), str(tmp_path / "audit.jsonl")
    bases = fill_to(log_dir, small_fs, REFUSE + 0.10, segment_size=SEGMENT)   # still above once 2 go
    assert len(bases) >= 8, bases
    now = time.time()
    age(log_dir, bases[:4], 2 * 3600, now)            # expired (reserve 1h); the rest fresh
    commit(log_dir, "etl", segment_end(log_dir, bases[1]))   # etl has read segments 0 and 1 only
    reached = disk_usage(small_fs).used_ratio
    assert reached > REFUSE
    path, _ = write_config(tmp_path, config_text(
        sidecar=True, service={"audit": audit}, log={"path": log_dir, "segment_size": "256KiB"},
        policy={"files_per_pass": 100, "disk_check_interval": "1s",
                "disk": {"clean_ratio": CLEAN, "force_ratio": FORCE, "refuse_writes_ratio": REFUSE, "force": False}}))
    with Sidecar(path, cwd=tmp_path) as sidecar:
        sidecar.wait_ready(timeout=60)                 # the first pass over the log is done
        sidecar.wait_for(lambda: len(audit_events(audit, "deleted")) >= 2, what="the expired, consumed segments")
        # Several more disk checks and passes (pressure, interval) have every chance to force.
        status = sidecar.wait_for(lambda: (lambda s: s if s["filesystems"] else None)(sidecar.get_json("/status")[1]))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            time.sleep(0.5)
            assert segment_bases(Path(log_dir)) == bases[2:], sidecar.log()
        deleted = sorted(e["base_offset"] for e in audit_events(audit, "deleted"))
        assert deleted == bases[:2]
        assert all(not e["unconsumed"] and e["overridden_by"] is None for e in audit_events(audit, "deleted"))
        assert disk_usage(small_fs).used_ratio > REFUSE, status
        with CommitLog.open(log_dir, segment_size=SEGMENT, flush="none", refuse_writes_ratio=REFUSE,
                            resume_ratio=FORCE) as writer, pytest.raises(StoreFullError):
            for _ in range(64):
                writer.append(os.urandom(4096))
    assert "Traceback" not in sidecar.log(), sidecar.log()
