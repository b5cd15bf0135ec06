"""The planner the JVM reader calls back (through Py4J) in the driver's Python process.

The JVM data source (jvm/src, `commitlog.spark.jvm.CommitLogProvider`) reads records; every
decision about *which* records stays here, in the code the Python data source runs: batch plans
are `reading.reader.CommitLogBatchReader.partitions`, streams are `reading.cluster_stream.stream_reader`
objects kept under an id for the stream's life (frontier, pending writers, group commits, data loss).
Which reader reads is decided here too (`reader`: across an S3 tier, the Python data source), and
what a plan tells the JVM of a `file://` archive tier (archive_plan).
One JSON request in, one JSON answer out; a failure is answered `{"error": "Name: message"}`, the
JVM raises it. Thread-safe: Py4J calls from several threads; each stream's calls are serialised.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading

from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from ..reading.reader import CommitLogBatchReader, LogPartition
from .archive_plan import archive_json, jvm_reads, listing_json, manifest_of
from ..schema import arrow_schema, check_readable, log_schema, required_schema, schema_from_json
from ..source_options import Options
from ..reading.cluster_stream import stream_reader

log = logging.getLogger("commitlog.spark")


def plan_json(options: Options, partitions: list[LogPartition]) -> dict:
    """What the JVM reader reads: the log, how data loss is handled, the partitions' runs and
    hosts (None: any host, the archive holds them all) and preferred hosts (keeping copies); with `archive`, where the tier's objects
    lie and, per partition, the manifest entries its runs touch (archive_plan)."""
    plan = {"path": options.path, "failOnDataLoss": options.fail_on_data_loss,
            "group": options.group,
            "partitions": [{"host": p.host, "runs": [list(r) for r in p.runs], "prefer": list(p.prefer)}
                           for p in partitions]}
    found = manifest_of(options)
    if found is not None:
        archive, manifest = found
        plan["archive"] = archive_json(archive)
        for part, planned in zip(plan["partitions"], partitions):
            part["archived"] = listing_json(manifest, planned)
    return plan


class Planner:
    """Implements the JVM interface `commitlog.spark.jvm.Planner` (see the module docstring)."""

    class Java:
        implements = ["commitlog.spark.jvm.Planner"]

    def __init__(self) -> None:
        self._streams: dict[str, tuple[DataSourceStreamReader, threading.Lock]] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def call(self, request: str) -> str:
        try:
            answer = self.answer(json.loads(request))
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the JVM, named
            log.debug("commitlog planner: request %s failed", request, exc_info=True)
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        return json.dumps(answer)

    def answer(self, request: dict) -> dict:
        op = request["op"]
        if op == "schema":
            return {"schema": required_schema(Options.parse(request["options"])).json()}
        if op == "reader":          # across an S3 tier, the Python data source reads
            return {"reader": "jvm" if jvm_reads(Options.parse(request["options"])) else "python"}
        if op == "batch":
            options = self._options(request)
            schema = arrow_schema(schema_from_json(request["schema"]))
            return plan_json(options, CommitLogBatchReader(options, schema).partitions())
        if op == "open":
            return self._open(request)
        reader, lock = self._stream(request["stream"])
        with lock:
            return self._stream_answer(op, request, reader)

    def _options(self, request: dict) -> Options:
        """The request's options; a user-given schema checked against the log's."""
        options = Options.parse(request["options"])
        stored = log_schema(options)
        if stored is not None:
            check_readable(stored, schema_from_json(request["schema"]), options.path)
        return options

    def _open(self, request: dict) -> dict:
        options = self._options(request)
        reader = stream_reader(options, arrow_schema(schema_from_json(request["schema"])))
        with self._lock:
            stream = str(next(self._ids))
            self._streams[stream] = (reader, threading.Lock())
        return {"stream": stream, **plan_json(options, [])}

    def _stream(self, stream: str) -> tuple[DataSourceStreamReader, threading.Lock]:
        with self._lock:
            found = self._streams.get(stream)
        if found is None:
            raise KeyError(f"no open commitlog stream {stream} (was it stopped?)")
        return found

    def _stream_answer(self, op: str, request: dict, reader: DataSourceStreamReader) -> dict:
        if op == "initialOffset":
            return {"offset": reader.initialOffset()}
        if op == "defaultReadLimit":
            limit = reader.getDefaultReadLimit()
            return {"maxRows": limit.max_rows if isinstance(limit, ReadMaxRows) else None}
        if op == "latestOffset":
            rows = request.get("maxRows")
            limit = ReadAllAvailable() if rows is None else ReadMaxRows(int(rows))
            return {"offset": reader.latestOffset(request["start"], limit)}
        if op == "reportLatestOffset":
            return {"offset": reader.reportLatestOffset()}
        if op == "prepareForTriggerAvailableNow":
            reader.prepareForTriggerAvailableNow()
            return {}
        if op == "partitions":
            return plan_json(reader.options, reader.partitions(request["start"], request["end"]))
        if op == "commit":
            reader.commit(request["end"])
            return {}
        if op == "stop":
            reader.stop()
            with self._lock:
                self._streams.pop(request["stream"], None)
            return {}
        raise ValueError(f"unknown planner request {op!r}")

