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
from .layout import META_FILE, TMP_SUFFIX, fsync_directory, meta_path
from .options import DEFAULT_SEGMENT_SIZE
from .safeopen import no_follow, temporary

FORMAT_VERSION = 2
FORMATS_READ = (1, 2)


def load_meta(directory: str, requested: int | None, *, create: bool) -> int:
    """The log's segment_size from meta.json; with `create`, a missing file is written with
    `requested` (or the default). SegmentSizeMismatchError when `requested` differs;
    CorruptLogError when the file is unreadable or names a format this store does not read."""
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
        with open(path, opener=no_follow) as f:
            meta = json.load(f)
        meta["segment_size"] = int(meta["segment_size"])
        meta["format"] = int(meta.get("format", 1))
    except FileNotFoundError:
        if missing_ok:
            return None
        raise NotALogError(directory, f"no {META_FILE}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptLogError(path, None, f"unreadable log metadata ({exc})") from exc
    if meta["format"] not in FORMATS_READ:
        raise CorruptLogError(path, None, f"format {meta['format']} is not one this store reads "
                                          f"({', '.join(map(str, FORMATS_READ))}): written by a "
                                          f"newer version?")
    return meta


def _write(directory: str, meta: dict) -> None:
    path = meta_path(directory)
    tmp = path + TMP_SUFFIX
    with open(tmp, "w", opener=temporary) as f:
        json.dump(meta, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_directory(directory)
