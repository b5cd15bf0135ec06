"""A keyed log stays the size of its live keys: deletes between live keys really go (each removed
run costs the 8-byte offset delta of the record after it, not a 29-byte gap record), the plan's
estimate is what is written, and every live record keeps its offset."""

from __future__ import annotations

import time

from commitlog import CommitLog, list_segments
from commitlog import record as rec

from compaction_helpers import compaction_config, planned_is_what_is_written, scan_pairs

KEYS = 20_000
SEGMENT = 64 * 1024


def _session_table(path) -> dict[int, bytes]:
    """20,000 keys written (40-byte values), every other one deleted right after the next is
    written; every group caught up. Returns the live records: offset -> key."""
    live = {}
    with CommitLog.open(path, segment_size=SEGMENT, flush="none") as log:
        for k in range(KEYS):
            offset = log.append(b"%040d" % k, key=b"key-%05d" % k)
            if k % 2:
                live[offset] = b"key-%05d" % k
                log.append(b"", key=b"key-%05d" % (k - 1))       # the delete marker of the one before
        log.commit("readers", log.end_offset)
    return live


def test_twenty_thousand_keys_half_deleted_compact_to_their_live_records(tmp_path):
    log_dir = tmp_path / "a"
    live = _session_table(log_dir)
    _, config = compaction_config(tmp_path, log_dir, segment_size="64KiB", keys="true",
                                  tombstone_retention="1s", min_age="0s", max_live_ratio=0.9)
    start = time.time()
    for run in range(3):                          # tombstones first seen, then past their retention
        planned_is_what_is_written(config, start + 10 * run)
    kept = scan_pairs(log_dir)
    with CommitLog.open(log_dir, readonly=True) as log:
        keys = {r.offset: bytes(r.key) for r in log.scan()}
        last = log.segments()[-1].base_offset
    # In the sealed segments only live records remain, every one at its offset, no delete marker;
    # the last (active) segment is never compacted.
    assert {o: k for o, k in keys.items() if o < last} == {o: k for o, k in live.items() if o < last}
    assert all(v for o, v in kept if o < last) and len([o for o in live if o < last]) > 9_000
    sealed = sum(f.size for f in list_segments(str(log_dir)).segments if f.base_offset < last)
    sealed_live = len([o for o in live if o < last]) * rec.encoded_size(40, len(b"key-00000"))
    print(f"sealed segments {sealed} bytes for {sealed_live} live bytes ({sealed / sealed_live:.3f} x)")
    assert sealed <= 1.25 * sealed_live + SEGMENT, (sealed, sealed_live)
