"""Streams over a cluster log: `spark.readStream.format("commitlog").option("path", p)
.option("archive", URL).option("group", g)` on any host (docs/spark-cluster.md, "Streams").

Offsets are the manifest's: a micro-batch (start, end] reads the committed records in
[start, end). The *frontier* is the newest manifest version's end offset, and a cluster job is in
a version whole or not at all, so a micro-batch never holds part of a job. Partitions are planned
as a batch read of a cluster log plans them (`reader.cluster_partitions`: whole entries of the
newest version, clipped), and any host reads them from the tier.

- Progress: the group's commits go to the tier (`commitlog.archive.groups`), the same from
  every host; stream offsets carry the tier (`tier_log.tier_fields`) so `progress`'s listener
  reaches it. `startingOffset` `group` (the default) starts at the group's newest commit there,
  so a new checkpoint resumes where a query on any host left the group.
- `failOnDataLoss`: a start below the archive's start (the tier's total retention advanced it)
  fails with a DataLossError naming the lost range; false skips it with a warning.
- `maxRowsPerTrigger` is refused: a manifest entry does not count rows.
- `Trigger.AvailableNow` pins the frontier of that moment.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, SupportsTriggerAvailableNow

from commitlog.archive import Manifest, Tier, open_archive, versions

from ..source_options import Options
from ..staging_errors import DataLossError, OptionError
from ..tier_log import (commit_group, group_offset, is_cluster_log, open_options_tier, tier_fields,
                        tier_name)
from .reader import LogPartition, cluster_partitions, read_partition
from .stream import CommitLogStreamReader, position

log = logging.getLogger("commitlog.spark")


def stream_reader(options: Options, schema: pa.Schema) -> DataSourceStreamReader:
    """The stream reader of the log the options name: a cluster log's on its tier, else the
    local log's (reading.stream)."""
    if is_cluster_log(options):
        return ClusterStreamReader(options, schema)
    return CommitLogStreamReader(options, schema)


def archive_start(manifest: Manifest) -> int:
    """The first offset the archive still holds (as `ArchivedLog.start_offset` gives it)."""
    return manifest.segments[0].base_offset if manifest.segments else manifest.start_offset


def first_readable(options: Options, start: int, kept: int) -> int:
    """`start`, or when the tier's retention removed [start, kept): a DataLossError naming it
    (failOnDataLoss=true) or `kept`, with a warning."""
    if start >= kept:
        return start
    if options.fail_on_data_loss:
        raise DataLossError(options.path, start, kept, options.group)
    log.warning("skipping offsets [%d, %d) of %s: removed by the tier's retention before they were "
                "read (failOnDataLoss=false)", start, kept, options.path)
    return kept


class ClusterStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Lives in Spark's source process on the driver; `read` runs in tasks on any host."""

    def __init__(self, options: Options, schema: pa.Schema) -> None:
        if options.max_rows_per_trigger:
            raise OptionError(f'option "maxRowsPerTrigger" is not supported on commit log {options.path}, '
                              f'a cluster log on {options.archive}: its manifest does not count rows')
        self.options = options
        self.schema_ipc = schema.serialize().to_pybytes()
        self._tier: Tier | None = None
        self._target: int | None = None       # AvailableNow's pinned frontier
        self._committed: int | None = None    # the group's offset this reader last committed

    def __getstate__(self) -> dict:           # pickled to the tasks: no client travels
        return {**self.__dict__, "_tier": None}

    def tier(self) -> Tier:
        if self._tier is None:
            self._tier = open_options_tier(self.options)
        return self._tier

    def manifest(self) -> Manifest:
        found = versions.newest(self.tier(), tier_name(self.options))
        return found[1] if found is not None else Manifest(tier_name(self.options))

    def offset_at(self, timestamp_ms: int) -> int:
        """The first offset stamped at or after `timestamp_ms`; the end when none is yet."""
        o = self.options
        with open_archive(o.archive, tier_name(o), endpoint=o.archive_endpoint,
                          region=o.archive_region) as archived:
            found = archived.offset_for_time(timestamp_ms)
            return archived.end_offset if found is None else found

    def frontier(self) -> int:
        """The highest offset a micro-batch may end at now: the newest version's end."""
        end = self.manifest().end_offset
        if self.options.ending_timestamp is not None:
            end = min(end, self.offset_at(self.options.ending_timestamp))
        return end

    def _at(self, offset: int) -> dict:
        return position(offset, self.options.path, self.options.group, tier_fields(self.options))

    def initialOffset(self) -> dict:
        how = self.options.starting_offset
        if self.options.starting_timestamp is not None:
            return self._at(self.offset_at(self.options.starting_timestamp))
        if how == "latest":
            return self._at(self.frontier())
        if how in ("earliest", "group"):
            committed = group_offset(self.options, self.options.group, self.tier()) \
                if how == "group" and self.options.group else None
            return self._at(archive_start(self.manifest()) if committed is None else committed)
        return self._at(int(how))

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.frontier()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        first = int(start["offset"])
        self._commit(first)          # planning the next batch: the sink committed `start`
        begin = first_readable(self.options, first, archive_start(self.manifest()))
        top = self.frontier() if self._target is None else min(self.frontier(), self._target)
        return self._at(max(begin, top))

    def reportLatestOffset(self) -> dict:
        return self._at(self.frontier())

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        first, last = int(start["offset"]), int(end["offset"])
        if last <= first:
            return []
        first = first_readable(self.options, first, archive_start(self.manifest()))
        window = dataclasses.replace(self.options, start_offset=first, end_offset=last,
                                     starting_timestamp=None, ending_timestamp=None)
        return cluster_partitions(window)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, LogPartition):
            return iter(())
        schema = pa.ipc.read_schema(pa.py_buffer(self.schema_ipc))
        return read_partition(self.options, schema, partition, self.options.group)

    def commit(self, end: dict) -> None:
        self._commit(int(end["offset"]))

    def _commit(self, offset: int) -> None:
        """Commit the group at `offset` on the tier unless this reader already did."""
        if not self.options.group or offset == self._committed:
            return
        commit_group(self.options, self.options.group, offset, self.tier())
        self._committed = offset
        log.info("consumer group %s of %s committed offset %d on %s", self.options.group,
                 self.options.path, offset, self.options.archive)

    def stop(self) -> None:
        self._tier = None
