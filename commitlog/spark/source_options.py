"""The data source's options, parsed and validated once (on the driver) into a picklable value.

Option names are case-insensitive (Spark passes a case-insensitive map). Every bad value is an
`OptionError` naming the option, raised before any task runs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from storesettings.archive_url import ArchiveURLError, parse_archive_url

from .staging_errors import OptionError

_SIZE = re.compile(r"^\s*(\d+)\s*(b|kib|mib|gib|kb|mb|gb|k|m|g)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {None: 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20,
               "mb": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}

DEFAULT_RECORD_BYTES = 4 << 20
DEFAULT_FLUSH_BYTES = 32 << 20
DEFAULT_LOCK_TIMEOUT = 300.0
DEFAULT_MIN_PARTITION_BYTES = 4 << 20
DEFAULT_MAX_PARTITION_BYTES = 128 << 20


@dataclass(frozen=True)
class Options:
    """Every option the source understands; see docs/spark.md for their meaning."""

    path: str
    segment_size: int | None = None          # segmentSize: for a log created by this write
    # writing
    record_bytes: int = DEFAULT_RECORD_BYTES  # recordBytes: Arrow data gathered into one record
    #                                           (at most an eighth of the segment size)
    flush_bytes: int = DEFAULT_FLUSH_BYTES   # flushBytes: bytes a task buffers between turns
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT   # lockTimeout: seconds to wait for a turn
    durable: bool = True                     # durable: fdatasync a task's records before it reports
    refuse_writes_ratio: float | None = 0.90  # refuseWritesRatio ("none" disables the guard)
    on_full: str = "raise"                   # onFull: raise | block
    block_timeout: float = 30.0              # blockTimeout
    sink_id: str | None = None               # sinkId (streaming sink; default: checkpointLocation)
    # reading
    start_offset: int | None = None          # startOffset (batch)
    end_offset: int | None = None            # endOffset (batch, exclusive)
    starting_timestamp: int | None = None    # startingTimestamp (ms): from the first record that late
    ending_timestamp: int | None = None      # endingTimestamp (ms): up to the first record that late
    max_partition_bytes: int | None = None   # maxPartitionBytes
    # streaming
    group: str | None = None                 # group: consumer group whose progress is committed
    starting_offset: str = "group"           # startingOffset: group | earliest | latest | <int>
    max_rows_per_trigger: int | None = None  # maxRowsPerTrigger
    fail_on_data_loss: bool = True           # failOnDataLoss
    # the archive tier (docs/archive.md): reads below the local start go there, on any host
    archive: str | None = None               # archive: s3://bucket/prefix or file:///dir
    archive_endpoint: str | None = None      # archiveEndpoint: an S3 API other than AWS's
    archive_region: str | None = None        # archiveRegion

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> "Options":
        opts = {str(k).lower(): v for k, v in dict(raw).items()}
        if "maxoffsetspertrigger" in opts:
            raise OptionError('option "maxOffsetsPerTrigger" is not supported: an offset here is '
                              'a staged record of thousands of rows; limit rows with '
                              '"maxRowsPerTrigger"')
        starting_key = _given(opts, "startingoffset")
        max_rows_key = _given(opts, "maxrowspertrigger")
        path = opts.get("path")
        if not path:
            raise OptionError('option "path" is required: .option("path", "/dir/of/the/log")')
        starting = str(opts.get(starting_key, "group")).strip().lower()
        if starting not in ("group", "earliest", "latest"):
            _int(opts, starting_key, minimum=0)
        on_full = str(opts.get("onfull", "raise")).strip().lower()
        if on_full not in ("raise", "block"):
            raise OptionError(f'option "onFull" must be raise or block, got {opts["onfull"]!r}')
        refuse_ratio = _refuse_ratio(opts)
        group = opts.get("group")
        if group is not None and not str(group).strip():
            raise OptionError('option "group" must be a non-empty consumer group name')
        result = cls(
            path=os.path.abspath(os.path.expanduser(str(path))),
            segment_size=_size(opts, "segmentsize"),
            record_bytes=_size(opts, "recordbytes") or DEFAULT_RECORD_BYTES,
            flush_bytes=_size(opts, "flushbytes") or DEFAULT_FLUSH_BYTES,
            lock_timeout=_float(opts, "locktimeout", DEFAULT_LOCK_TIMEOUT, low=0.0),
            durable=_bool(opts, "durable", True),
            refuse_writes_ratio=refuse_ratio,
            on_full=on_full,
            block_timeout=_float(opts, "blocktimeout", 30.0, low=0.0),
            sink_id=_sink_id(opts),
            start_offset=_int(opts, "startoffset", minimum=0),
            end_offset=_int(opts, "endoffset", minimum=0),
            starting_timestamp=_int(opts, "startingtimestamp", minimum=0),
            ending_timestamp=_int(opts, "endingtimestamp", minimum=0),
            max_partition_bytes=_size(opts, "maxpartitionbytes"),
            group=None if group is None else str(group).strip(),
            starting_offset=starting,
            max_rows_per_trigger=_int(opts, max_rows_key, minimum=1),
            fail_on_data_loss=_bool(opts, "failondataloss", True),
            archive=_archive_url(opts),
            archive_endpoint=_text(opts, "archiveendpoint"),
            archive_region=_text(opts, "archiveregion"),
        )
        _check_bounds(result, opts, starting_key)
        return result


def _refuse_ratio(opts: dict) -> float | None:
    """`refuseWritesRatio`: a ratio in [0, 1] (default 0.90), or none/off for no refusal."""
    refuse = opts.get("refusewritesratio")
    if refuse is not None and str(refuse).strip().lower() in ("none", "off", ""):
        return None
    return _float(opts, "refusewritesratio", 0.90, low=0.0, high=1.0)


def _check_bounds(result: "Options", opts: dict, starting_key: str) -> None:
    """OptionError when two options say where to start (or end), or an end lies below its start."""
    for timestamp, offsets in (("startingtimestamp", ("startoffset", starting_key)),
                               ("endingtimestamp", ("endoffset",))):
        clash = next((o for o in offsets if timestamp in opts and o in opts), None)
        if clash:
            raise OptionError(f'options "{_name(timestamp)}" and "{_name(clash)}" both say where to '
                              f'{"start" if timestamp[0] == "s" else "end"}: give one')
    if (result.starting_timestamp is not None and result.ending_timestamp is not None
            and result.ending_timestamp < result.starting_timestamp):
        raise OptionError(f'option "endingTimestamp" ({result.ending_timestamp}) is below '
                          f'"startingTimestamp" ({result.starting_timestamp})')
    if (result.start_offset is not None and result.end_offset is not None
            and result.end_offset < result.start_offset):
        raise OptionError(f'option "endOffset" ({result.end_offset}) is below "startOffset" '
                          f'({result.start_offset})')


def _archive_url(opts: dict) -> str | None:
    url = _text(opts, "archive")
    if url is not None:
        try:
            parse_archive_url(url)
        except ArchiveURLError as exc:
            raise OptionError(f'option "archive": {exc}') from None
    return url


def _text(opts: dict, key: str) -> str | None:
    value = opts.get(key)
    if value is None:
        return None
    if not str(value).strip():
        raise OptionError(f'option "{_name(key)}" must not be empty')
    return str(value).strip()


# Spark's Kafka source's names, taken in the same meaning: a Kafka record is one row here.
_KAFKA_NAMES = {"startingoffset": "startingoffsets", "maxrowspertrigger": "maxrecordspertrigger"}


def _given(opts: dict, own: str) -> str:
    """The key under which `opts` gives option `own`: its own name or Kafka's (not both)."""
    kafka = _KAFKA_NAMES[own]
    if kafka not in opts:
        return own
    if own in opts:
        raise OptionError(f'options "{_name(kafka)}" and "{_name(own)}" are one option '
                          f"(Kafka's name and this source's): give one")
    return kafka


_NAMES = {"startingoffsets": "startingOffsets", "maxrecordspertrigger": "maxRecordsPerTrigger",
          "segmentsize": "segmentSize", "recordbytes": "recordBytes", "flushbytes": "flushBytes",
          "locktimeout": "lockTimeout", "durable": "durable", "refusewritesratio": "refuseWritesRatio", "blocktimeout": "blockTimeout",
          "startoffset": "startOffset", "endoffset": "endOffset",
          "maxpartitionbytes": "maxPartitionBytes", "maxrowspertrigger": "maxRowsPerTrigger",
          "failondataloss": "failOnDataLoss", "startingoffset": "startingOffset",
          "startingtimestamp": "startingTimestamp", "endingtimestamp": "endingTimestamp",
          "archive": "archive", "archiveendpoint": "archiveEndpoint", "archiveregion": "archiveRegion"}


def _name(key: str) -> str:
    return _NAMES.get(key, key)


def _int(opts: dict, key: str, *, minimum: int) -> int | None:
    raw = opts.get(key)
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise OptionError(f'option "{_name(key)}" must be an integer, got {raw!r}') from None
    if value < minimum:
        raise OptionError(f'option "{_name(key)}" must be at least {minimum}, got {value}')
    return value


def _size(opts: dict, key: str) -> int | None:
    raw = opts.get(key)
    if raw is None:
        return None
    m = _SIZE.match(str(raw))
    if not m or int(m.group(1)) <= 0:
        raise OptionError(f'option "{_name(key)}" must be a positive size such as 1048576 or '
                          f'"64MiB", got {raw!r}')
    return int(m.group(1)) * _SIZE_UNITS[m.group(2).lower() if m.group(2) else None]


def _float(opts: dict, key: str, default: float, *, low: float, high: float | None = None) -> float:
    raw = opts.get(key)
    if raw is None:
        return default
    try:
        value = float(str(raw).strip().rstrip("s"))
    except ValueError:
        raise OptionError(f'option "{_name(key)}" must be a number, got {raw!r}') from None
    if value < low or (high is not None and value > high):
        bound = f"between {low:g} and {high:g}" if high is not None else f"at least {low:g}"
        raise OptionError(f'option "{_name(key)}" must be {bound}, got {raw!r}')
    return value


def _bool(opts: dict, key: str, default: bool) -> bool:
    raw = opts.get(key)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise OptionError(f'option "{_name(key)}" must be true or false, got {raw!r}')


def _sink_id(opts: dict) -> str | None:
    explicit = opts.get("sinkid")
    if explicit is not None and str(explicit).strip():
        return str(explicit).strip()
    checkpoint = opts.get("checkpointlocation")
    if checkpoint:
        return "checkpoint:" + os.path.abspath(os.path.expanduser(str(checkpoint)))
    return None
