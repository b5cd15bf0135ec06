"""Batch reads: `spark.read.format("commitlog").option("path", p).load()`.

The driver plans partitions from the ledger: the visible (committed) records in
[startOffset, endOffset), cut into offset ranges of about `maxPartitionBytes` each (by default the
data split evenly over the machine's cores, between 4 MiB and 128 MiB), so a large log reads in
parallel. Each partition lists runs of consecutive visible offsets; a task scans them in log
order and yields one `pyarrow.RecordBatch` per record.

Zero copy: records are scanned with `zero_copy=True`, and each batch is deserialized straight from
the memoryview into the segment's mapping (`pa.py_buffer(view)`): no payload byte is copied in
Python. The batch keeps a buffer export of that view, and a mapping cannot be closed while
exported (mmap raises BufferError, the store defers the close), so a batch never outlives its
mapping; retention unlinking the file meanwhile does not invalidate it either (segments are never
truncated). The only copy is Spark's own, when the batch is written to the JVM.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from commitlog import ATTR_CONTROL, ATTR_DEAD, CommitLog, OffsetOutOfRangeError
from commitlog.archive import ArchivedLog, local_copies, open_archive, open_tier
from commitlog.archive.tiered import archive_reader
from commitlog.errors import CorruptLogError

from ..staging_errors import DataLossError, StagingError
from ..host import check_host, this_host
from ..ledger.ledger_view import LedgerView, VisibleRecord
from ..ledger.marking import mark_dead_records
from ..source_options import DEFAULT_MAX_PARTITION_BYTES, DEFAULT_MIN_PARTITION_BYTES, Options
from ..schema import conform, decode
from ..tier_log import is_cluster_log

log = logging.getLogger("commitlog.spark")

_SKIP = ATTR_DEAD | ATTR_CONTROL


@dataclass(frozen=True)
class LogPartition(InputPartition):
    """Runs [start, end) of consecutive visible offsets, read in this order by one task, on the
    host that planned it; on any host (`host` None) when the log's archive holds them all."""

    runs: tuple[tuple[int, int], ...]
    rows: int
    bytes: int
    host: str | None
    prefer: tuple[str, ...] = ()     # hosts keeping copies of its data (a cluster log's), most first


def open_log(options: Options) -> CommitLog:
    """The log at `options.path`, read-only, across its archive tier when `archive` is given."""
    return CommitLog.open(options.path, readonly=True, archive=_tier(options))


def _tier(options: Options):
    if options.archive is None:
        return None
    return open_tier(options.archive, endpoint=options.archive_endpoint, region=options.archive_region)


def _open_archived(options: Options) -> ArchivedLog:
    """The log's archived part alone, from any host (its folder is named after the directory)."""
    return open_archive(options.archive, os.path.basename(options.path), endpoint=options.archive_endpoint,
                        region=options.archive_region)


def _open_cached(options: Options) -> ArchivedLog:
    """The log's archived part, read from this host's copies where they are valid (its local
    directory is a cache of this tier: commitlog.archive.local_copies), else from the tier."""
    name = os.path.basename(options.path)
    try:
        marker = local_copies.read_marker(options.path)
    except CorruptLogError:
        marker = None
    if marker is None or (marker.url, marker.log) != (options.archive, name):
        return _open_archived(options)
    return ArchivedLog(archive_reader(local_copies.CachedTier(_tier(options), options.path, name), None, name))


def partition_target(total_bytes: int, explicit: int | None) -> int:
    """Bytes per partition: `maxPartitionBytes`, else Spark's own rule for files (the data
    spread over the cores, between 4 MiB and 128 MiB); a partition costs a python task's
    start-up, so one per core beats several small ones."""
    if explicit:
        return explicit
    cores = os.cpu_count() or 1
    return max(DEFAULT_MIN_PARTITION_BYTES,
               min(DEFAULT_MAX_PARTITION_BYTES, math.ceil(total_bytes / cores)))


def plan_partitions(records: list[VisibleRecord], max_bytes: int | None,
                    archived_end: int = 0) -> list[LogPartition]:
    """Cut visible records (in offset order) into partitions of about `max_bytes`, evenly:
    n partitions of total/n bytes each, so that the last is not a small straggler. A partition
    wholly below `archived_end` (what the log's archive holds) may run on any host."""
    if not records:
        return []
    here = this_host()

    def where(runs: list[tuple[int, int]]) -> str | None:
        return None if runs[-1][1] <= archived_end else here

    total = sum(r.bytes for r in records)
    count = max(1, round(total / partition_target(total, max_bytes)))
    share = total / count
    parts: list[LogPartition] = []
    runs: list[tuple[int, int]] = []
    rows = size = done = 0
    for r in records:
        if runs and done + size + r.bytes / 2 > share * (len(parts) + 1):
            parts.append(LogPartition(tuple(runs), rows, size, where(runs)))
            done += size
            runs, rows, size = [], 0, 0
        if runs and runs[-1][1] == r.offset:
            runs[-1] = (runs[-1][0], r.offset + 1)
        else:
            runs.append((r.offset, r.offset + 1))
        rows += r.rows
        size += r.bytes
    parts.append(LogPartition(tuple(runs), rows, size, where(runs)))
    return parts


def read_partition(options: Options, schema: pa.Schema, partition: LogPartition,
                   group: str | None = None) -> Iterator[pa.RecordBatch]:
    """Yield the partition's batches, conformed to `schema`. A run removed by retention meanwhile
    fails (DataLossError naming the lost range) or, with failOnDataLoss=false, is skipped."""
    if partition.host is None:
        clog = _open_cached(options)        # the archive holds every run: any host reads it
    else:
        check_host(partition.host, options.path, "read")
        clog = open_log(options)
    try:
        for start, end in partition.runs:
            offset = start
            while offset < end:
                try:
                    for rec in clog.scan(offset, end, zero_copy=True):
                        offset = rec.offset + 1
                        if rec.attributes & _SKIP:
                            continue
                        yield conform(decode(rec.value), schema)
                    # Records after the last one returned may be dead (marked, or removed by a
                    # compaction): only a log that ends early lost what the ledger committed.
                    if offset < end and clog.end_offset < end:
                        raise StagingError(
                            f"commit log {options.path} ends at offset {offset} but records up to "
                            f"{end} were committed to it (was the log replaced or truncated?)")
                    break
                except OffsetOutOfRangeError as exc:
                    lost_to = min(end, max(exc.start_offset, offset + 1))
                    if options.fail_on_data_loss:
                        raise DataLossError(options.path, offset, lost_to, group) from exc
                    log.warning("skipping offsets [%d, %d) of %s: removed by retention before "
                                "they were read (failOnDataLoss=false)", offset, lost_to, options.path)
                    offset = lost_to
    finally:
        clog.close()


def check_lost(options: Options, clog: CommitLog, start: int, group: str | None = None) -> int:
    """The first offset to read at or after `start`: `start` itself; the log's start offset when
    compactions removed [start, log start) (dead records only: passed silently); or, when
    retention removed [start, r), a DataLossError naming that range (failOnDataLoss=true) or the
    log's start offset with a warning."""
    first = clog.start_offset
    if start >= first:
        return start
    kept = clog.retention_start_offset
    if start >= kept:
        return first
    if options.fail_on_data_loss:
        raise DataLossError(options.path, start, kept, group)
    log.warning("skipping offsets [%d, %d) of %s: removed by retention before they were read "
                "(failOnDataLoss=false)", start, kept, options.path)
    return first


def _offset_at(clog: CommitLog, timestamp_ms: int) -> int:
    """The first offset stamped at or after `timestamp_ms`; the end when none is yet."""
    found = clog.offset_for_time(timestamp_ms)
    return clog.end_offset if found is None else found


def cluster_partitions(opts: Options) -> list[LogPartition]:
    """A cluster log's partitions, planned from its newest manifest version alone (every record
    it lists is committed; tasks skip control and dead records): whole segments, clipped to
    [startOffset, endOffset), grouped into about `maxPartitionBytes` each, readable on any host,
    preferring the hosts that keep copies of its segments (their entries' `host`)."""
    with _open_archived(opts) as clog:
        manifest = clog.archive.manifest()
        start = clog.start_offset if opts.start_offset is None else opts.start_offset
        end = clog.end_offset if opts.end_offset is None else min(opts.end_offset, clog.end_offset)
        if opts.starting_timestamp is not None:
            start = _offset_at(clog, opts.starting_timestamp)
        if opts.ending_timestamp is not None:
            end = min(end, _offset_at(clog, opts.ending_timestamp))
    pieces = [(max(s.base_offset, start), min(s.end_offset, end), s.bytes, s.host) for s in manifest.segments
              if s.base_offset < end and start < s.end_offset]
    target = partition_target(sum(p[2] for p in pieces), opts.max_partition_bytes)
    parts: list[LogPartition] = []
    runs: list[tuple[int, int]] = []
    held: dict[str, int] = {}
    size = 0
    for first, stop, nbytes, host in pieces:
        if runs and size + nbytes / 2 > target:
            parts.append(LogPartition(tuple(runs), 0, size, None, _most_first(held)))
            runs, size, held = [], 0, {}
        if runs and runs[-1][1] == first:
            runs[-1] = (runs[-1][0], stop)
        else:
            runs.append((first, stop))
        size += nbytes
        if host is not None:
            held[host] = held.get(host, 0) + nbytes
    if runs:
        parts.append(LogPartition(tuple(runs), 0, size, None, _most_first(held)))
    return parts


def _most_first(held: dict[str, int]) -> tuple[str, ...]:
    return tuple(sorted(held, key=lambda h: (-held[h], h)))


class CommitLogBatchReader(DataSourceReader):
    """Plans partitions on the driver; `read` runs in the tasks."""

    def __init__(self, options: Options, schema: pa.Schema) -> None:
        self.options = options
        self.schema_ipc = schema.serialize().to_pybytes()

    def partitions(self) -> list[LogPartition]:
        opts = self.options
        if is_cluster_log(opts):
            return cluster_partitions(opts)
        with open_log(opts) as clog, LedgerView(opts.path) as ledger:
            end = clog.end_offset if opts.end_offset is None else opts.end_offset
            if opts.ending_timestamp is not None:
                end = min(end, _offset_at(clog, opts.ending_timestamp))
            start = clog.start_offset if opts.start_offset is None else \
                check_lost(opts, clog, opts.start_offset)
            if opts.starting_timestamp is not None:
                start = _offset_at(clog, opts.starting_timestamp)
            records = ledger.visible(start, end)
            mark_dead_records(opts.path, ledger, clog)   # the catch-up after a crash
            archived = clog.archive.end_offset if clog.archive is not None else 0
        return plan_partitions(records, opts.max_partition_bytes, archived)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, LogPartition):
            return iter(())  # Spark's placeholder partition of an empty plan
        schema = pa.ipc.read_schema(pa.py_buffer(self.schema_ipc))
        return read_partition(self.options, schema, partition)
