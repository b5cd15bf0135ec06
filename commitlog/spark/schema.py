"""The log's schema and the record payload: one Arrow IPC stream (schema + one batch) per record.

The schema the log keeps is a Spark `StructType` (its JSON, in the staging ledger): it names Spark
types exactly (TimestampType and TimestampNTZType both become Arrow timestamps, so an Arrow schema
alone would lose which one it was). Its Arrow form, with timestamps in UTC, is what every record
carries and what Spark's Python data source reader expects back.

Appending is allowed when the DataFrame has the same field names, in the same order, with the same
types; nullability may differ and is widened (a nullable column makes the stored one nullable).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import ArrayType, DataType, MapType, StructField, StructType

from commitlog import RecordTooLargeError
from commitlog.layout import META_FILE

from .ledger.ledger_view import LedgerView
from .staging_errors import NoSchemaError, SchemaMismatchError
from .tier_log import cluster_manifest

# Arrow IPC buffers are 8-byte aligned relative to the message start. A record's value starts
# 21 bytes (the record header) plus the key length after the record's position; with a key length
# of 3 mod 8 and payloads padded to 8 bytes, values read back from the mapping are 8-aligned.
_ALIGN = 8
_RECORD_HEADER = 21
_KEY_PREFIX = b"spark:"


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema records carry and readers return (Spark's own mapping, UTC timestamps)."""
    return to_arrow_schema(schema, timezone="UTC")


def schema_from_json(text: str) -> StructType:
    return StructType.fromJson(json.loads(text))


def _loose(dt: DataType) -> DataType:
    """`dt` with every nullability flag set and field metadata dropped: what must match."""
    if isinstance(dt, StructType):
        return StructType([StructField(f.name, _loose(f.dataType), True) for f in dt.fields])
    if isinstance(dt, ArrayType):
        return ArrayType(_loose(dt.elementType), True)
    if isinstance(dt, MapType):
        return MapType(_loose(dt.keyType), _loose(dt.valueType), True)
    return dt


def _widen(stored: DataType, incoming: DataType) -> DataType:
    """`stored` made nullable wherever `incoming` is (the two are equal up to nullability)."""
    if isinstance(stored, StructType):
        return StructType([
            StructField(s.name, _widen(s.dataType, i.dataType), s.nullable or i.nullable, s.metadata)
            for s, i in zip(stored.fields, incoming.fields)])
    if isinstance(stored, ArrayType):
        return ArrayType(_widen(stored.elementType, incoming.elementType),
                         stored.containsNull or incoming.containsNull)
    if isinstance(stored, MapType):
        return MapType(_widen(stored.keyType, incoming.keyType),
                       _widen(stored.valueType, incoming.valueType),
                       stored.valueContainsNull or incoming.valueContainsNull)
    return stored


def _first_difference(stored: StructType, incoming: StructType) -> str:
    if len(stored.fields) != len(incoming.fields):
        return (f"the log has {len(stored.fields)} column(s) {stored.names}, the DataFrame has "
                f"{len(incoming.fields)} {incoming.names}")
    for s, i in zip(stored.fields, incoming.fields):
        if s.name != i.name:
            return f"column {s.name!r} of the log is {i.name!r} in the DataFrame (names and order must match)"
        if _loose(s.dataType) != _loose(i.dataType):
            return (f"column {s.name!r} is {s.dataType.simpleString()} in the log but "
                    f"{i.dataType.simpleString()} in the DataFrame")
    return "the schemas differ"


def merge_for_append(stored: StructType | None, incoming: StructType, path: str) -> StructType:
    """The schema the log has after appending a DataFrame of schema `incoming`, or a
    SchemaMismatchError that names the first incompatible column."""
    if stored is None:
        return incoming
    if _loose(stored) != _loose(incoming):
        raise SchemaMismatchError(
            f"cannot append to commit log {path}: {_first_difference(stored, incoming)}. The log's "
            f"schema is {stored.simpleString()}; the DataFrame's is {incoming.simpleString()}.")
    return _widen(stored, incoming)


def check_readable(stored: StructType, requested: StructType, path: str) -> None:
    """A user-given read schema must match the log's up to nullability."""
    if _loose(stored) != _loose(requested):
        raise SchemaMismatchError(
            f"cannot read commit log {path} as {requested.simpleString()}: "
            f"{_first_difference(stored, requested).replace('DataFrame', 'requested schema')}")


def conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """`batch` with exactly the schema `target` (names, nullability, time zone), without copying
    data: relabel when only top-level flags differ, else a cast (zero-copy for these changes)."""
    if batch.schema.equals(target):
        return batch
    try:
        return pa.RecordBatch.from_arrays(batch.columns, schema=target)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return batch.cast(target)


def record_key(writer_id: str) -> bytes:
    """The key of every record a writer appends: names the writer; its length is 3 mod 8 so the
    value behind the 21-byte header starts 8-aligned."""
    key = _KEY_PREFIX + writer_id.encode("ascii") + b":"
    pad = (-(_RECORD_HEADER + len(key))) % _ALIGN
    return key + b"0" * pad


def writer_of_key(key: bytes | None) -> str | None:
    """The writer id a record key names, or None for a record no Spark writer appended."""
    if not key or not key.startswith(_KEY_PREFIX):
        return None
    return bytes(key[len(_KEY_PREFIX):]).split(b":", 1)[0].decode("ascii", "replace")


def encode(batch: pa.RecordBatch) -> pa.Buffer:
    """One record's payload: an Arrow IPC stream holding `batch` (a multiple of 8 bytes long)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue()


def encode_bounded(batch: pa.RecordBatch, max_bytes: int) -> Iterator[tuple[pa.Buffer, int]]:
    """(payload, rows) pairs for `batch`, halving it until each payload fits `max_bytes`."""
    blob = encode(batch)
    if blob.size <= max_bytes:
        yield blob, batch.num_rows
        return
    if batch.num_rows <= 1:
        raise RecordTooLargeError(
            f"a single row encodes to {blob.size} bytes, more than a record can hold "
            f"({max_bytes} bytes with this log's segment size); use a larger segmentSize")
    half = batch.num_rows // 2
    yield from encode_bounded(batch.slice(0, half), max_bytes)
    yield from encode_bounded(batch.slice(half), max_bytes)


def decode(value) -> pa.RecordBatch:
    """The batch of one record's payload; `value` may be a memoryview into the mapping, which the
    batch then references (no copy): the mapping stays alive as long as the batch does."""
    reader = pa.ipc.open_stream(pa.py_buffer(value))
    return reader.read_next_batch()


def stored_schema(path: str) -> StructType | None:
    """The Spark schema recorded for the log at `path`, or None (no log, or nothing staged)."""
    if not (os.path.isfile(os.path.join(path, META_FILE)) and LedgerView.exists(path)):
        return None
    with LedgerView(path) as ledger:
        text = ledger.schema_json()
    return None if text is None else schema_from_json(text)


def log_schema(options) -> StructType | None:
    """The schema of the log the options name: a cluster log's newest manifest version's
    (commitlog.spark.tier_log), else the one its local ledger records (`stored_schema`)."""
    manifest = cluster_manifest(options)
    if manifest is None:
        return stored_schema(options.path)
    return schema_from_json(manifest.spark_schema) if manifest.spark_schema else None


def required_schema(options) -> StructType:
    """The log's recorded schema (`log_schema`), or NoSchemaError saying how to give one."""
    path = options.path
    stored = log_schema(options)
    if stored is None:
        raise NoSchemaError(
            f"commit log {path} has no staged schema: write a DataFrame to it first "
            f"(df.write.format('commitlog').option('path', ...).mode('append').save()), "
            f"or give the reader one with .schema(...)")
    return stored
