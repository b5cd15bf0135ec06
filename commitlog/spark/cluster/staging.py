"""What one task attempt of a cluster write stages on the tier, and keeps on its host.

The attempt appends its records to a private local log, seals it, and uploads each sealed segment's bytes up to its end
marker and its index (without the base offset it records: the commit assigns the offsets) under
`<log>/staged/<job>/<attempt>/<k:06d>.log` and `.index`, each verified by the tier. Records carry
no offsets (commitlog.record), so an object reads the same at whatever base a manifest gives it.
An attempt that dies leaves objects no commit message names (the collector's, later).

With `cache` (the log's local directory on this host, a cache of the tier:
commitlog.archive.local_copies), the private log lives in `cache/staged/<job>/<attempt>.tmp/` and
each uploaded segment file is renamed to `cache/<key>` (cut at its end marker: the tier object's
bytes), its index written beside it: no copy. The entry then names this host (`host`). Without it,
or when keeping a copy fails (a warning), the private log is a temporary directory and nothing is
kept. The private log is removed whatever happens.
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace

from commitlog import CommitLog
from commitlog.archive import ArchivedSegment, Tier, local_copies
from commitlog.archive.job_claims import staged_prefix
from commitlog.archive.log_archive import staged_index
from commitlog.errors import CorruptLogError, UnsafeLogFileError
from commitlog.layout import INDEX_SUFFIX, SEGMENT_SUFFIX, index_path
from commitlog.safeopen import no_follow
from commitlog.timeroll import roll_idle

from ..host import executor_host

log = logging.getLogger("commitlog.spark")

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
    host: str | None = None          # the host keeping a copy of it (cache/<key>), if any

    def at(self, base: int, now_ms: int) -> ArchivedSegment:
        """Its manifest entry once the commit placed it at `base`."""
        return ArchivedSegment(base, base + self.records, self.bytes, self.sha256, self.index_bytes,
                               self.index_sha256, self.last_timestamp_ms, now_ms, self.key, self.index_key,
                               self.host)


def stage(tier: Tier, name: str, job_id: str, attempt_id: str, segment_size: int,
          records: Iterable[tuple[bytes, bytes]], cache: str | None = None) -> list[StagedSegment]:
    """Append `records` ((value, key) pairs) to a private local log, seal it and upload its
    segments, kept in `cache` when given (the module docstring); the staged segments in log order."""
    prefix = staged_prefix(name, job_id, attempt_id)[len(name) + 1:]
    folder = _workspace(cache, prefix.rstrip("/"))
    if folder is None:
        cache, folder = None, tempfile.mkdtemp(prefix="commitlog-cluster-")
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
        staged = []
        for k, (info, end) in enumerate(zip(sealed, ends)):
            segment, index = _upload(tier, name, f"{prefix}{k:06d}", info, end - info.base_offset)
            staged.append(segment if cache is None else _keep(cache, segment, info.path, index))
        return staged
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _workspace(cache: str | None, key: str) -> str | None:
    """The private log's home in `cache` (cache/<key>.tmp), None without one or when it cannot be made."""
    if cache is None:
        return None
    try:
        return local_copies.workspace(cache, key)
    except (OSError, UnsafeLogFileError) as exc:
        log.warning("cluster cache %s: no room for a private log (%s): nothing kept on this host", cache, exc)
        return None


def _keep(cache: str, segment: StagedSegment, path: str, index: bytes) -> StagedSegment:
    """`segment` kept in `cache` (its file renamed, its index written), naming this host; as it
    was when keeping it fails (a warning: the tier holds it)."""
    try:
        local_copies.keep_file(cache, segment.key, path, segment.bytes)
        local_copies.keep_bytes(cache, segment.index_key, index)
    except (OSError, UnsafeLogFileError) as exc:
        log.warning("cluster cache %s: %s not kept on this host (%s)", cache, segment.key, exc)
        return segment
    return replace(segment, host=executor_host())


def _upload(tier: Tier, name: str, stem: str, info, records: int) -> tuple[StagedSegment, bytes]:
    if info.active:
        raise CorruptLogError(info.path, None, "a staged segment was left unsealed")
    index = staged_index(index_path(info.path))
    if index is None:
        raise CorruptLogError(index_path(info.path), None, "not a sealed index")
    with open(info.path, "rb", opener=no_follow) as data:
        stored = tier.put(f"{name}/{stem}{SEGMENT_SUFFIX}", data, info.used_bytes)
    stored_index = tier.put(f"{name}/{stem}{INDEX_SUFFIX}", io.BytesIO(index), len(index))
    return StagedSegment(f"{stem}{SEGMENT_SUFFIX}", f"{stem}{INDEX_SUFFIX}", records, info.used_bytes, stored.sha256,
                         len(index), stored_index.sha256, info.last_timestamp_ms), index


def unstage(tier: Tier, name: str, staged: Iterable[StagedSegment]) -> None:
    """Delete staged objects (an aborted job's); errors propagate (the caller may pass them)."""
    for segment in staged:
        tier.delete(f"{name}/{segment.key}")
        tier.delete(f"{name}/{segment.index_key}")
