"""Appending from Spark tasks: each task appends what it buffered in turns (see `turns`).

A background thread in each task takes the turns, so the task keeps receiving and encoding
batches from the JVM meanwhile; across tasks only the copy into the mapping is serialised. Two
concurrent jobs therefore both land whole, interleaved at turn granularity, each visible only
once committed (see `ledger.ledger`).

Before its first append a writer registers in the ledger, under the turn, with the log's end
offset as its first possible offset: a stream's frontier never passes a record whose writer is
unresolved.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import uuid
from collections.abc import Iterable

import pyarrow as pa

from ..host import check_host
from ..ledger.ledger import Ledger
from ..ledger.marking import mark_dead_records
from ..schema import conform, encode_bounded, record_key
from .target import WriteTarget
from .append_lock import append_turn, open_for_append, sync_segments


class Appender:
    """One task attempt's writer. The task's thread gathers Spark's Arrow batches into records
    and encodes them; a background thread appends each `flushBytes` of them in a turn, so the
    task keeps receiving batches from the JVM while it waits for its turn, copies into the
    mapping and syncs. At most two chunks are in flight (memory: about 3 x flushBytes)."""

    def __init__(self, target: WriteTarget) -> None:
        self.target = target
        self.writer_id = uuid.uuid4().hex
        self.key = record_key(self.writer_id)
        self.registered = False
        self._pending: list[tuple[pa.Buffer, int]] = []
        self._pending_bytes = 0
        self._ledger: Ledger | None = None
        self._queue: queue.Queue = queue.Queue(maxsize=1)
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None

    def write_all(self, batches: Iterable[pa.RecordBatch]) -> tuple[str | None, int, int]:
        """Append every batch; returns (writer_id or None when nothing was written, records,
        rows) as the ledger holds them. On any failure the writer is declared dead."""
        schema = self.target.arrow_schema
        # Records of at most an eighth of a segment: a segment wastes at most that at its end.
        record_bytes = min(self.target.options.record_bytes, self.target.segment_size // 8)
        group: list[pa.RecordBatch] = []
        group_bytes = 0
        check_host(self.target.host, self.target.options.path, "write")
        try:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                group.append(conform(batch, schema))
                group_bytes += batch.nbytes
                if group_bytes >= record_bytes:
                    self._add(group, record_bytes)
                    group, group_bytes = [], 0
            self._add(group, record_bytes)
            self._submit()
            self._stop()
            if not self.registered:
                return None, 0, 0
            records, rows = self._ledger_handle().finish_writer(self.writer_id)
            return self.writer_id, records, rows
        except BaseException:
            self._stop(raise_failure=False)
            if self.registered:
                with contextlib.suppress(Exception):
                    self._ledger_handle().kill_writer(self.writer_id)
                    mark_dead_records(self.target.options.path, self._ledger_handle())
            raise
        finally:
            if self._ledger is not None:
                self._ledger.close()
                self._ledger = None

    def _add(self, group: list[pa.RecordBatch], record_bytes: int) -> None:
        """Buffer `group` as records of about `record_bytes`: Spark hands over batches of
        spark.sql.execution.arrow.maxRecordsPerBatch rows (10,000 by default) whatever their
        width; small ones are gathered (fewer, bigger records read back faster), big ones cut."""
        if not group:
            return
        batch = group[0] if len(group) == 1 else pa.concat_batches(group)
        pieces = max(1, round(batch.nbytes / record_bytes))
        step = -(-batch.num_rows // pieces)
        for start in range(0, batch.num_rows, step):
            piece = batch.slice(start, step) if pieces > 1 else batch
            for blob, rows in encode_bounded(piece, self.target.max_record_bytes):
                self._pending.append((blob, rows))
                self._pending_bytes += blob.size
        if self._pending_bytes >= self.target.options.flush_bytes:
            self._submit()

    # ------------------------------------------------------------------ the background thread
    def _submit(self) -> None:
        """Hand the pending records to the background thread (waiting while it still has a
        chunk queued); re-raise its failure here, in the task's thread."""
        self._check()
        if not self._pending:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="commitlog-spark-append",
                                            daemon=True)
            self._thread.start()
        chunk, self._pending, self._pending_bytes = self._pending, [], 0
        while True:
            try:
                self._queue.put(chunk, timeout=0.2)
                return
            except queue.Full:
                self._check()

    def _stop(self, *, raise_failure: bool = True) -> None:
        if self._thread is not None:
            while self._thread.is_alive():
                try:
                    self._queue.put(None, timeout=0.2)
                    break
                except queue.Full:
                    continue
            self._thread.join()
            self._thread = None
        if raise_failure:
            self._check()

    def _check(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _run(self) -> None:
        while True:
            chunk = self._queue.get()
            if chunk is None:
                return
            try:
                self._append(chunk)
            except BaseException as exc:  # noqa: BLE001 - handed to the task's thread
                self._failure = exc
                return

    def _ledger_handle(self) -> Ledger:
        if self._ledger is None:
            self._ledger = Ledger(self.target.options.path)
        return self._ledger

    def _append(self, chunk: list[tuple[pa.Buffer, int]]) -> None:
        """One turn: open the log, append `chunk`, close it; then, after the turn, make the
        records durable (unless durable=false) while the next task appends."""
        opts = self.target.options
        ledger = self._ledger_handle()
        added: list[tuple[int, int, int]] = []
        with append_turn(opts.path, opts.lock_timeout):
            clog = open_for_append(opts, None, opts.lock_timeout)
            try:
                if not self.registered:
                    ledger.register_writer(self.writer_id, self.target.job_id, clog.end_offset,
                                           self.target.owner)
                    self.registered = True
                key = self.key
                append = clog.append
                for blob, rows in chunk:
                    added.append((append(memoryview(blob), key=key), rows, blob.size))
            finally:
                clog.close()
                if added:
                    # Recorded even when an append failed midway: those records are the writer's.
                    ledger.add_records(self.writer_id, added)
        if opts.durable and added:
            sync_segments(opts.path, added[0][0], added[-1][0])
