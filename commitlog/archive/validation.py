"""What the archive checks before trusting a name or a manifest it did not make itself.

    log_name(name)                 a log's name on a tier: one safe key component, else
                                   InvalidArgumentError (it is joined into file paths and S3 keys)
    manifest_fields(data, url, key, fields, required)
                                   a manifest's JSON, every field typed and in range, its
                                   segments in order and not overlapping; ArchiveCorruptError
                                   naming the field otherwise (never a TypeError, never a
                                   record skipped on a manifest's word). Unknown top-level keys
                                   are kept out of the way, not refused (a newer format's);
                                   `jobs` (a list of job ids) and `spark_schema` (a str) are
                                   optional, an entry's `key`/`index_key` a relative key, its
                                   `host` a host name (optional too).

Holes between segments are allowed: a compaction may drop a segment before it was archived
(reads say so). An entry whose offsets or sizes disagree with its objects is found by the reader
(commitlog.archive.remote), which checks the objects against the entry.
"""

from __future__ import annotations

import json
import re

from ..errors import ArchiveCorruptError, InvalidArgumentError

FORMAT = 1
MAX_INT = (1 << 63) - 1              # offsets, sizes and times are int64 wherever they are stored
MAX_EPOCH_MS = 253_402_300_799_999    # 9999-12-31T23:59:59.999Z: a time a datetime can show
MAX_NAME = 255                       # a file name's limit on every local filesystem we support
MAX_KEY = 1024                       # an object key's limit on S3
_SHA256 = re.compile(r"[0-9a-f]{64}")
_SEGMENT_INTS = ("base_offset", "end_offset", "bytes", "index_bytes", "archived_at_ms")


def log_name(name: object) -> str:
    """`name` if it is a single safe path component: a non-empty str of at most MAX_NAME
    characters, not `.` or `..`, without `/`, `\\`, NUL or another control character."""
    if not isinstance(name, str) or not name or name in (".", "..") or len(name) > MAX_NAME \
            or any(c in "/\\" or ord(c) < 32 or ord(c) == 127 for c in name):
        shown = repr(name) if len(repr(name)) <= 80 else repr(name)[:77] + "..."
        raise InvalidArgumentError(f"archive log name {shown}: a log's name on a tier is one path "
                                   f"component (no '/', '\\', '..', NUL or control character, "
                                   f"1-{MAX_NAME} characters)")
    return name


def manifest_fields(data: bytes, url: str, key: str, fields: frozenset[str],
                    required: frozenset[str]) -> dict:
    """The manifest `data` parsed and checked: {"log", "start_offset", "segments": [dict, ...]}
    with every value of the type and range the manifest's format says; a segment's entry has the
    `required` keys and no other than `fields` (manifest.ArchivedSegment's)."""
    def bad(where: str, why: str) -> ArchiveCorruptError:
        return ArchiveCorruptError(url, key, f"not a manifest: {where}: {why}")

    try:
        body = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise bad("the whole object", f"not JSON ({str(exc)[:80]})") from None
    if not isinstance(body, dict):
        raise bad("the whole object", f"a JSON {type(body).__name__}, not an object")
    if _field(body, "format", bad, "") != FORMAT or isinstance(body["format"], bool):
        raise bad("format", f"{_shown(body['format'])}, expected {FORMAT}")
    name = _field(body, "log", bad, "")
    try:
        log_name(name)
    except InvalidArgumentError:
        raise bad("log", f"{_shown(name)} is not a log's name") from None
    start = _int(body, "start_offset", bad, "")
    segments = _field(body, "segments", bad, "")
    if not isinstance(segments, list):
        raise bad("segments", f"a {type(segments).__name__}, not a list")
    checked = [_segment(s, f"segments[{i}]", bad, fields, required) for i, s in enumerate(segments)]
    for i in range(1, len(checked)):
        before, entry = checked[i - 1], checked[i]
        if entry["base_offset"] < before["end_offset"]:
            raise bad(f"segments[{i}].base_offset", f"{entry['base_offset']} is inside the segment "
                      f"before it, [{before['base_offset']}, {before['end_offset']}): entries overlap "
                      f"or are out of order")
    jobs = body.get("jobs", [])
    if not isinstance(jobs, list) or not all(isinstance(j, str) and j for j in jobs):
        raise bad("jobs", f"{_shown(jobs)} is not a list of job ids")
    schema = body.get("spark_schema")
    if schema is not None and not isinstance(schema, str):
        raise bad("spark_schema", f"a {type(schema).__name__}, not a str")
    return {"log": name, "start_offset": start, "segments": checked, "jobs": jobs, "spark_schema": schema}


def stored_int(value: object, high: int = MAX_INT) -> bool:
    """Whether `value` is an int (not a bool) in [0, high]: an offset, a size, a pid."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= high


def epoch_ms(value: object) -> bool:
    """Whether `value` is a time in milliseconds since the epoch that a datetime can show."""
    return stored_int(value, MAX_EPOCH_MS)


def relative_key(value: object) -> bool:
    """Whether `value` is a key below a log's folder: '/'-separated non-empty parts, none '.' or
    '..', no backslash or control character, at most MAX_KEY characters."""
    return isinstance(value, str) and 0 < len(value) <= MAX_KEY \
        and all(p not in ("", ".", "..") for p in value.split("/")) \
        and not any(c == "\\" or ord(c) < 32 or ord(c) == 127 for c in value)


def host_name(value: object) -> bool:
    """Whether `value` names a host: a non-empty str of at most MAX_NAME characters, no
    whitespace, '/', '\\' or control character."""
    return isinstance(value, str) and 0 < len(value) <= MAX_NAME \
        and not any(c.isspace() or c in "/\\" or ord(c) < 32 or ord(c) == 127 for c in value)


def _segment(entry: object, where: str, bad, fields: frozenset[str], required: frozenset[str]) -> dict:
    if not isinstance(entry, dict):
        raise bad(where, f"a JSON {type(entry).__name__}, not an object")
    unknown = sorted(set(entry) - fields, key=str)
    if unknown:
        raise bad(f"{where}.{_shown(unknown[0])}", "not a field of an archived segment")
    for name in sorted(required):
        _field(entry, name, bad, where)
    for name in _SEGMENT_INTS:
        _int(entry, name, bad, where)
    for name in ("sha256", "index_sha256"):
        value = _field(entry, name, bad, where)
        if not isinstance(value, str) or not _SHA256.fullmatch(value):
            raise bad(f"{where}.{name}", f"{_shown(value)} is not a SHA-256 (64 hex digits)")
    for name in ("key", "index_key"):
        if entry.get(name) is not None and not relative_key(entry[name]):
            raise bad(f"{where}.{name}", f"{_shown(entry[name])} is not a key below the log's folder")
    host = entry.get("host")
    if host is not None and not host_name(host):
        raise bad(f"{where}.host", f"{_shown(host)} is not a host name")
    if _field(entry, "last_timestamp_ms", bad, where) is not None:     # a record's time may be negative
        _int(entry, "last_timestamp_ms", bad, where, low=-MAX_INT - 1)
    base, end = entry["base_offset"], entry["end_offset"]
    if end < base:
        raise bad(f"{where}.end_offset", f"{end} is before its base_offset {base}")
    if end > base and entry["bytes"] == 0:
        raise bad(f"{where}.bytes", f"0 for the offsets [{base}, {end}): a segment holding "
                  f"records has bytes")
    return entry


def _field(body: dict, name: str, bad, where: str) -> object:
    if name not in body:
        raise bad(f"{where}.{name}" if where else name, "missing")
    return body[name]


def _int(body: dict, name: str, bad, where: str, low: int = 0) -> int:
    value = _field(body, name, bad, where)
    if type(value) is not int or not low <= value <= MAX_INT:
        raise bad(f"{where}.{name}" if where else name,
                  f"{_shown(value)} is not an integer in [{'0' if low == 0 else '-2**63'}, 2**63)")
    return value


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
