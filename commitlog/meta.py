"""The log's metadata file (`meta.json`): its segment size and its format version.

Format 1: records carry no offset; a compaction leaves a gap record (record.ATTR_GAP) for each run
of offsets it removes. Format 2: a compaction instead gives the first record it keeps after a
removed run an offset delta (record.ATTR_DELTA). Appends write the same bytes in both. A log is
created in format 2; a format-1 log is read as it is, and moved to format 2 (the file rewritten
atomically) by its first compaction, before any delta is written: a store older than format 2
would misread them. Functions of a directory, process-safe (an atomic replace, idempotent).
"""

from __future__ import annotations

import json
import os

from .errors import CorruptLogError, NotALogError, SegmentSizeMismatchError
from .layout import (META_FILE, START_OFFSET_FILE, STATE_FILE, TMP_SUFFIX, fsync_directory,
                     meta_path, parse_segment_name)
from .options import DEFAULT_SEGMENT_SIZE, MAX_SEGMENT_SIZE, MIN_SEGMENT_SIZE
from .safeopen import check_not_link, no_follow, temporary

FORMAT_VERSION = 2
FORMATS_READ = (1, 2)
_MAX_META_BYTES = 1 << 16            # a meta.json is a few dozen bytes: more is not one


def load_meta(directory: str, requested: int | None, *, create: bool) -> int:
    """The log's segment_size from meta.json; with `create`, a missing file is written with
    `requested` (or the default). SegmentSizeMismatchError when `requested` differs;
    CorruptLogError naming the file and field when it is unreadable, a field is not an integer
    in range, or it names a format this store does not read."""
    meta = _read(directory, missing_ok=create)
    if meta is None:
        size = requested or DEFAULT_SEGMENT_SIZE
        _write(directory, {"format": FORMAT_VERSION, "segment_size": size})
        return size
    size = meta["segment_size"]
    if requested is not None and requested != size:
        raise SegmentSizeMismatchError(
            f"log {directory} was created with segment_size={size}; "
            f"cannot reopen it with segment_size={requested}")
    return size


def log_format(directory: str) -> int:
    """The format version meta.json names (1 when it names none: logs made before it did)."""
    return _read(directory, missing_ok=False)["format"]


def upgrade_format(directory: str) -> None:
    """Move a format-1 log to format 2 (durably, before the caller writes what format 1 lacks)."""
    meta = _read(directory, missing_ok=False)
    if meta["format"] < FORMAT_VERSION:
        _write(directory, {**meta, "format": FORMAT_VERSION})


def _read(directory: str, *, missing_ok: bool) -> dict | None:
    path = meta_path(directory)
    try:
        with open(path, "rb", opener=no_follow) as f:
            raw = f.read(_MAX_META_BYTES + 1)
    except FileNotFoundError:
        if missing_ok:
            return None
        raise NotALogError(directory, f"no {META_FILE}") from None
    except IsADirectoryError:
        raise CorruptLogError(path, None, "it is a directory, not the log's metadata") from None
    if len(raw) > _MAX_META_BYTES:
        raise CorruptLogError(path, None, f"unreadable log metadata: more than {_MAX_META_BYTES} bytes")
    try:
        meta = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise CorruptLogError(path, None, f"unreadable log metadata ({str(exc)[:80]})") from None
    if not isinstance(meta, dict):
        raise CorruptLogError(path, None, "unreadable log metadata: not a JSON object")
    meta.setdefault("format", 1)
    for field, low, high in (("segment_size", MIN_SEGMENT_SIZE, MAX_SEGMENT_SIZE),
                             ("format", 1, 1 << 31)):
        value = meta.get(field)
        if type(value) is not int or not low <= value <= high:  # bool and float are refused
            shown = "missing" if field not in meta else f"{str(value)[:40]!r}"
            raise CorruptLogError(path, None, f"field {field} is {shown}: expected an integer "
                                              f"from {low} to {high}")
    if meta["format"] not in FORMATS_READ:
        raise CorruptLogError(path, None, f"format {meta['format']} is not one this store reads "
                                          f"({', '.join(map(str, FORMATS_READ))}): written by a "
                                          f"newer version?")
    return meta


def refuse_orphaned(directory: str) -> None:
    """CorruptLogError when `directory` holds a log's files but no meta.json: its segment size is
    lost, and writing a default one would misread every segment. UnsafeLogFileError instead when
    one of those names is a symbolic link (planted, not a log's file). Checked before a writer's
    open creates anything."""
    if os.path.lexists(meta_path(directory)):
        return
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return
    found = sorted(n for n in names if parse_segment_name(n) is not None
                   or n in (STATE_FILE, START_OFFSET_FILE))
    for name in found:
        check_not_link(os.path.join(directory, name))
    if found:
        raise CorruptLogError(meta_path(directory), None,
                              f"{META_FILE} is missing, but the directory holds a log's files "
                              f"({', '.join(found[:3])}{', ...' if len(found) > 3 else ''}): its "
                              f"segment size is unknown; restore {META_FILE} from a backup or a "
                              f"copy of the same log's settings, nothing was changed")


def _write(directory: str, meta: dict) -> None:
    path = meta_path(directory)
    tmp = path + TMP_SUFFIX
    with open(tmp, "w", opener=temporary) as f:
        json.dump(meta, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_directory(directory)
