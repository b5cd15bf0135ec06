"""Batch writes of a cluster log: `df.write.format("commitlog").option("archive", URL)` from
executors on any host (docs/spark-cluster.md).

`prepare` runs on the driver before any task: it opens the tier, marks the log a cluster log
(`cluster.json`; refused when the name holds a single host's archive), checks the DataFrame's
schema against the newest manifest version's, and names the job. Each task stages its records
(`staging`); the driver's `commit` makes the job's staged segments visible in one new manifest
version (`commit`), `abort` drops them. No local log directory is used on the driver; on each
task's host, the log's path is a cache of the tier holding what the host staged
(commitlog.archive.local_copies, staging).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from commitlog import DEFAULT_SEGMENT_SIZE
from commitlog.archive import Tier, local_copies, versions
from commitlog.archive.manifest import MANIFEST_KEY

from ..schema import arrow_schema, conform, encode_bounded, merge_for_append, record_key, schema_from_json
from ..source_options import Options
from ..staging_errors import OptionError
from ..tier_log import open_options_tier, tier_name
from . import commit as committing
from .staging import StagedSegment, stage

log = logging.getLogger("commitlog.spark")

_RECORD_OVERHEAD = 21 + 64          # a record's header and writer key, generously


@dataclass(frozen=True)
class ClusterTarget:
    """What every task of a cluster job needs. Immutable, picklable."""

    options: Options
    name: str                        # the log's folder on the tier
    spark_schema: str                # the log's schema with this job's merged in (StructType JSON)
    arrow_schema_ipc: bytes
    segment_size: int
    job_id: str

    def tier(self) -> Tier:
        return open_options_tier(self.options)


def prepare(options: Options, schema: StructType) -> ClusterTarget:
    """Open the cluster job (see the module docstring); SchemaMismatchError before any task when
    the DataFrame cannot be appended, OptionError when the name holds a single host's archive."""
    tier = open_options_tier(options)
    name = tier_name(options)
    if not versions.is_cluster(tier, name):
        if tier.size(f"{name}/{MANIFEST_KEY}") is not None:
            raise OptionError(f"log {name} on {options.archive} is a single host's archive (its "
                              f"uploader owns it): a cluster write needs a log name of its own")
        versions.mark_cluster(tier, name, int(time.time() * 1000))
    found = versions.newest(tier, name)
    stored = found[1].spark_schema if found is not None else None
    merged = merge_for_append(schema_from_json(stored) if stored else None, schema, options.path)
    return ClusterTarget(options, name, merged.json(), arrow_schema(merged).serialize().to_pybytes(),
                         options.segment_size or DEFAULT_SEGMENT_SIZE, f"batch-{uuid.uuid4().hex}")


@dataclass(frozen=True)
class StagedMessage(WriterCommitMessage):
    """What one task attempt staged: its segments (in log order), records and rows."""

    attempt_id: str
    segments: tuple[StagedSegment, ...]
    rows: int


def encoded(batches: Iterable[pa.RecordBatch], schema: pa.Schema, record_bytes: int,
            max_record_bytes: int) -> Iterator[tuple[pa.Buffer, int]]:
    """(payload, rows) records of `batches` conformed to `schema`: small batches gathered up to
    about `record_bytes`, big ones cut, each payload at most `max_record_bytes`."""
    group, size = [], 0
    for batch in batches:
        if not batch.num_rows:
            continue
        group.append(conform(batch, schema))
        size += batch.nbytes
        if size >= record_bytes:
            yield from _cut(group, record_bytes, max_record_bytes)
            group, size = [], 0
    if group:
        yield from _cut(group, record_bytes, max_record_bytes)


def _cut(group: list[pa.RecordBatch], record_bytes: int, max_record_bytes: int):
    batch = group[0] if len(group) == 1 else pa.concat_batches(group)
    pieces = max(1, round(batch.nbytes / record_bytes))
    step = -(-batch.num_rows // pieces)
    for start in range(0, batch.num_rows, step):
        yield from encode_bounded(batch.slice(start, step) if pieces > 1 else batch, max_record_bytes)


def stage_rows(t: ClusterTarget, job_id: str, iterator: Iterator[pa.RecordBatch]) -> StagedMessage:
    """A task attempt of job `job_id`: its rows staged on the tier (`staging`)."""
    attempt_id = uuid.uuid4().hex
    key = record_key(attempt_id)
    record_bytes = min(t.options.record_bytes, t.segment_size // 8)
    rows = 0

    def records() -> Iterator[tuple[pa.Buffer, bytes]]:
        nonlocal rows
        for blob, n in encoded(iterator, pa.ipc.read_schema(pa.py_buffer(t.arrow_schema_ipc)),
                               record_bytes, t.segment_size - _RECORD_OVERHEAD):
            rows += n
            yield memoryview(blob), key

    o = t.options
    cache = o.path if local_copies.mark(o.path, o.archive, o.archive_endpoint, o.archive_region, t.name) \
        else None
    staged = stage(t.tier(), t.name, job_id, attempt_id, t.segment_size, records(), cache)
    return StagedMessage(attempt_id, tuple(staged), rows)


def commit_staged(t: ClusterTarget, job_id: str, messages) -> committing.Committed:
    """The driver's commit of job `job_id` from its tasks' messages (`commit`); a job the
    manifest lists already is not appended again (`already`)."""
    mine = [m for m in messages if isinstance(m, StagedMessage)]

    def merge(stored: str | None) -> str:       # a concurrent job may have widened it
        return merge_for_append(schema_from_json(stored) if stored else None,
                                schema_from_json(t.spark_schema), t.options.path).json()

    done = committing.commit(t.tier(), t.name, job_id, [s for m in mine for s in m.segments], merge)
    log.info("job %s committed %d record(s), %d row(s) to %s on %s at offsets [%d, %d)%s", job_id,
             done.end - done.first, sum(m.rows for m in mine), t.name, t.options.archive, done.first,
             done.end, " (committed before)" if done.already else "")
    return done


def abort_staged(t: ClusterTarget, job_id: str, messages) -> None:
    staged = [s for m in messages if isinstance(m, StagedMessage) for s in m.segments]
    committing.abort(t.tier(), t.name, job_id, staged)
    log.warning("job %s aborted: nothing of it is visible in %s on %s", job_id, t.name, t.options.archive)


class ClusterBatchWriter(DataSourceArrowWriter):
    """The writer of one cluster batch job (pickled to every task)."""

    def __init__(self, target: ClusterTarget) -> None:
        self.target = target

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedMessage:
        return stage_rows(self.target, self.target.job_id, iterator)

    def commit(self, messages) -> None:
        commit_staged(self.target, self.target.job_id, messages)

    def abort(self, messages) -> None:
        abort_staged(self.target, self.target.job_id, messages)
