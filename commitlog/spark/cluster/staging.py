"""What one task attempt of a cluster write stages on the tier.

The attempt appends its records to a private local log (a temporary directory on the executor's
own disk, removed afterwards), seals it, and uploads each sealed segment's bytes up to its end
marker and its index (without the base offset it records: the commit assigns the offsets) under
`<log>/staged/<job>/<attempt>/<k:06d>.log` and `.index`, each verified by the tier. Records carry
no offsets (commitlog.record), so an object reads the same at whatever base a manifest gives it.
An attempt that dies leaves objects no commit message names (the collector's, later).
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass

from commitlog import CommitLog
from commitlog.archive import ArchivedSegment, Tier
from commitlog.archive.log_archive import staged_index
from commitlog.errors import CorruptLogError
from commitlog.layout import INDEX_SUFFIX, SEGMENT_SUFFIX, index_path
from commitlog.safeopen import no_follow
from commitlog.timeroll import roll_idle

STAGED = "staged"


def staged_prefix(name: str, job_id: str, attempt_id: str) -> str:
    return f"{name}/{STAGED}/{job_id}/{attempt_id}/"


@dataclass(frozen=True)
class StagedSegment:
    """One staged segment as the task uploaded it; keys are below the log's folder. Immutable."""

    key: str
    index_key: str
    records: int                     # offsets it spans
    bytes: int
    sha256: str
    index_bytes: int
    index_sha256: str
    last_timestamp_ms: int | None

    def at(self, base: int, now_ms: int) -> ArchivedSegment:
        """Its manifest entry once the commit placed it at `base`."""
        return ArchivedSegment(base, base + self.records, self.bytes, self.sha256, self.index_bytes,
                               self.index_sha256, self.last_timestamp_ms, now_ms, self.key, self.index_key)


def stage(tier: Tier, name: str, job_id: str, attempt_id: str, segment_size: int,
          records: Iterable[tuple[bytes, bytes]]) -> list[StagedSegment]:
    """Append `records` ((value, key) pairs) to a private local log, seal it and upload its
    segments; the staged segments in log order. The local log is removed whatever happens."""
    folder = tempfile.mkdtemp(prefix="commitlog-cluster-")
    path = os.path.join(folder, name)
    try:
        with CommitLog.open(path, segment_size, flush="none", refuse_writes_ratio=None) as clog:
            for value, key in records:
                clog.append(value, key=key)
        # Sealed now: its first record counts as a second older than its roll_after, whatever its clock.
        roll_idle(path, 1e-3, now_ns=time.time_ns() + 1_000_000_000)
        with CommitLog.open(path, readonly=True) as clog:
            sealed = [s for s in clog.segments() if s.record_count or s.used_bytes]
            ends = [clog.segment_end_offset(s.base_offset) for s in sealed]
        prefix = staged_prefix(name, job_id, attempt_id)[len(name) + 1:]
        return [_upload(tier, name, f"{prefix}{k:06d}", info, end - info.base_offset)
                for k, (info, end) in enumerate(zip(sealed, ends))]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _upload(tier: Tier, name: str, stem: str, info, records: int) -> StagedSegment:
    if info.active:
        raise CorruptLogError(info.path, None, "a staged segment was left unsealed")
    index = staged_index(index_path(info.path))
    if index is None:
        raise CorruptLogError(index_path(info.path), None, "not a sealed index")
    with open(info.path, "rb", opener=no_follow) as data:
        stored = tier.put(f"{name}/{stem}{SEGMENT_SUFFIX}", data, info.used_bytes)
    stored_index = tier.put(f"{name}/{stem}{INDEX_SUFFIX}", io.BytesIO(index), len(index))
    return StagedSegment(f"{stem}{SEGMENT_SUFFIX}", f"{stem}{INDEX_SUFFIX}", records, info.used_bytes, stored.sha256,
                         len(index), stored_index.sha256, info.last_timestamp_ms)


def unstage(tier: Tier, name: str, staged: Iterable[StagedSegment]) -> None:
    """Delete staged objects (an aborted job's); errors propagate (the caller may pass them)."""
    for segment in staged:
        tier.delete(f"{name}/{segment.key}")
        tier.delete(f"{name}/{segment.index_key}")
