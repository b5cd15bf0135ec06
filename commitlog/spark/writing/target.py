"""What a write appends to: prepared once on the driver, before any task writes.

`prepare_write` creates the log if it is missing, checks the DataFrame's schema against the log's
and records the (possibly widened) schema, all before Spark plans a single task, so an
incompatible append fails with nothing written. The result is pickled to every task.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.types import StructType

from commitlog import META_FILE, CommitLog, SegmentSizeMismatchError

from ..ledger import processes
from ..host import this_host
from ..ledger.ledger import Ledger
from ..ledger.marking import mark_dead_records
from ..source_options import Options
from ..schema import arrow_schema, merge_for_append, schema_from_json
from .append_lock import append_turn, open_for_append

_RECORD_OVERHEAD = 21 + 64          # a record's header and writer key, generously


@dataclass(frozen=True)
class WriteTarget:
    """Everything a task needs to append to the log. Immutable, picklable."""

    options: Options
    arrow_schema_ipc: bytes          # the log's Arrow schema, serialized
    segment_size: int
    job_id: str                      # the batch job, or the streaming query run
    owner: processes.ProcessId | None  # the driver JVM: when it is gone, nobody can commit
    host: str                        # the host that planned the write, where the log lives

    @property
    def arrow_schema(self) -> pa.Schema:
        return pa.ipc.read_schema(pa.py_buffer(self.arrow_schema_ipc))

    @property
    def max_record_bytes(self) -> int:
        return self.segment_size - _RECORD_OVERHEAD


def ensure_log(options: Options) -> tuple[int, int]:
    """Create the log at `options.path` if it does not exist; return its segment size and its
    start offset."""
    if not os.path.isfile(os.path.join(options.path, META_FILE)):
        os.makedirs(options.path, exist_ok=True)
        with append_turn(options.path, options.lock_timeout):
            open_for_append(options, options.segment_size, options.lock_timeout).close()
    with CommitLog.open(options.path, readonly=True) as clog:
        size, start = clog.segment_size, clog.start_offset
    if options.segment_size is not None and options.segment_size != size:
        raise SegmentSizeMismatchError(
            f"log {options.path} was created with segment_size={size}; option segmentSize="
            f"{options.segment_size} does not match it")
    return size, start


def prepare_write(options: Options, schema: StructType, kind: str,
                  sink_id: str | None = None) -> WriteTarget:
    """Create the log if needed, merge `schema` into the log's (SchemaMismatchError if it cannot
    be appended), and, for a batch job, open the job in the ledger. A streaming sink's tasks
    register under the sink's run id, which the driver's commit (a fresh process per
    micro-batch) derives from the sink id alone."""
    segment_size, start_offset = ensure_log(options)
    with Ledger(options.path) as ledger:
        def merge(current: str | None) -> str:
            stored = schema_from_json(current) if current else None
            return merge_for_append(stored, schema, options.path).json()
        merged = schema_from_json(ledger.update_schema(merge))
        owner = processes.jvm_ancestor()
        if kind == "batch":
            job_id = f"batch-{uuid.uuid4().hex}"
            ledger.open_job(job_id, kind, owner)
        else:
            job_id = "sink-" + hashlib.sha1(str(sink_id).encode()).hexdigest()[:16]
        ledger.prune(start_offset)
        mark_dead_records(options.path, ledger)    # the catch-up after a crash
    return WriteTarget(options, arrow_schema(merged).serialize().to_pybytes(), segment_size,
                       job_id, owner, this_host())

