"""Streaming reads: `spark.readStream.format("commitlog").option("path", p).option("group", g)`.

Offsets are log offsets, `{"offset": n, "commitlog": path, "group": g}` (no "group" without one;
a checkpoint holding `{"offset": n}` alone still resumes): a micro-batch (start, end] reads the
visible records in [start, end). Invariant: the end of a micro-batch never passes the *frontier*
(the log's end offset, or the first offset an unresolved writer may have appended at, whichever
is lower), so records of a job that commits later are never skipped. Options: `maxRowsPerTrigger`
(whole records, at least one), `Trigger.AvailableNow` (the frontier pinned), `failOnDataLoss`,
`startingOffset` (`group`, `earliest`, `latest` or an offset). The group's progress is committed
by `latestOffset(start)`, Spark's `commit(end)` and `progress.ProgressListener`. Why, and the
details: docs, Spark ("How it works inside"). A cluster log is streamed by
`reading.cluster_stream` instead.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadLimit, ReadMaxRows,
                                              SupportsTriggerAvailableNow)

from commitlog import CommitLog

from ..ledger.ledger_view import LedgerView
from ..ledger.marking import mark_dead_records
from ..source_options import Options
from .reader import LogPartition, check_lost, open_log, plan_partitions, read_partition

log = logging.getLogger("commitlog.spark")


def _offset(value: dict) -> int:
    return int(value["offset"])


def position(offset: int, path: str, group: str | None, tier: dict | None = None) -> dict:
    """The stream offset of log offset `offset`: it names the log and the group for `progress`,
    and a cluster log's tier (`tier_log.tier_fields`)."""
    value = {"offset": offset, "commitlog": path}
    if group:
        value["group"] = group
    if tier:
        value.update(tier)
    return value


class CommitLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Lives in Spark's long-running source process on the driver; `read` runs in tasks."""

    def __init__(self, options: Options, schema: pa.Schema) -> None:
        self.options = options
        self.schema_ipc = schema.serialize().to_pybytes()
        self._clog: CommitLog | None = None
        self._ledger: LedgerView | None = None
        self._target: int | None = None       # AvailableNow's pinned frontier
        self._committed: int | None = None    # the group's offset this reader last committed

    # Handles are opened lazily: the reader is pickled before it runs on the driver.
    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_clog"] = state["_ledger"] = None
        return state

    def _handles(self) -> tuple[CommitLog, LedgerView]:
        if self._clog is None:
            self._clog = open_log(self.options)
            self._ledger = LedgerView(self.options.path)
            # The catch-up: dead records a crash left unmarked.
            mark_dead_records(self.options.path, self._ledger, self._clog)
        return self._clog, self._ledger

    def frontier(self) -> int:
        """The highest offset a micro-batch may end at now."""
        clog, ledger = self._handles()
        end = clog.end_offset                 # first the log's end, then the pending writers:
        dead = ledger.resolve_abandoned()     # a writer registering after this read of the end
        floor = ledger.pending_floor()        # appends at or above it
        if dead:
            mark_dead_records(self.options.path, ledger, clog)
        if self.options.ending_timestamp is not None:  # the stream stops before the first record that late
            stop = clog.offset_for_time(self.options.ending_timestamp)
            end = end if stop is None else min(end, stop)
        return end if floor is None else min(end, floor)

    # ------------------------------------------------------------------ offsets
    def _at(self, offset: int) -> dict:
        return position(offset, self.options.path, self.options.group)

    def initialOffset(self) -> dict:
        clog, _ = self._handles()
        how = self.options.starting_offset
        if self.options.starting_timestamp is not None:
            found = clog.offset_for_time(self.options.starting_timestamp)
            return self._at(self.frontier() if found is None else found)
        if how == "earliest":
            return self._at(clog.start_offset)
        if how == "latest":
            return self._at(self.frontier())
        if how == "group":
            committed = clog.committed().get(self.options.group) if self.options.group else None
            return self._at(clog.start_offset if committed is None else committed)
        return self._at(int(how))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_rows_per_trigger:
            return ReadMaxRows(self.options.max_rows_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.frontier()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        clog, ledger = self._handles()
        self._commit(_offset(start))     # planning the next batch: the sink committed `start`
        begin = check_lost(self.options, clog, _offset(start), self.options.group)
        top = self.frontier()
        if self._target is not None:
            top = min(top, self._target)
        if top <= begin:
            return self._at(max(begin, _offset(start)))
        if isinstance(limit, ReadMaxRows):
            taken = 0
            for rec in ledger.visible_iter(begin, top):
                if taken and taken + rec.rows > limit.max_rows:
                    return self._at(rec.offset)
                taken += rec.rows
        return self._at(top)

    def reportLatestOffset(self) -> dict | None:
        return self._at(self.frontier())

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        first, last = _offset(start), _offset(end)
        if last <= first:
            return []
        clog, ledger = self._handles()
        first = check_lost(self.options, clog, first, self.options.group)
        archived = clog.archive.end_offset if clog.archive is not None else 0
        return plan_partitions(ledger.visible(first, last), self.options.max_partition_bytes, archived)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, LogPartition):
            return iter(())
        schema = pa.ipc.read_schema(pa.py_buffer(self.schema_ipc))
        return read_partition(self.options, schema, partition, self.options.group)

    # ------------------------------------------------------------------ progress
    def commit(self, end: dict) -> None:
        self._commit(_offset(end))

    def _commit(self, offset: int) -> None:
        """Commit the group at `offset` unless this reader already did (idle triggers plan again
        and again from the same start)."""
        if not self.options.group or offset == self._committed:
            return
        clog, _ = self._handles()
        clog.commit(self.options.group, offset)
        self._committed = offset
        log.info("consumer group %s of %s committed offset %d", self.options.group,
                 self.options.path, offset)

    def stop(self) -> None:
        if self._clog is not None:
            self._clog.close()
            self._ledger.close()
            self._clog = self._ledger = None
