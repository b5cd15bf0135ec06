"""The log's damage record (`damage.json`): what a writer's open found damaged in the last segment
and what it did about it, for the operator and the retention sidecar (health problem
`log-damaged`, one audit line per entry).

A torn tail (nothing verifying after it) is not damage: it is cut and logged at WARNING. Damage
(records that verify after bytes that do not) adds an entry, logged at ERROR:

    {"id", "time", "segment", "position", "bytes", "kind", "offsets": [first, end) | null,
     "saved": file name | null, "detail"}

kind: `record-lost`, `length-repaired`, `records-unplaced`, `offsets-skipped` (what each means and
what to do: docs, Troubleshooting, "A damaged log"). The file is replaced atomically, never through
a symlink, and only grows; the operator removes it. `read_damage` never raises for its content.
Functions of a directory, process-safe under the writer lock (the only writer of the file).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time

from .errors import UnsafeLogFileError
from .layout import DAMAGE_FILE, TMP_SUFFIX, damage_path, fsync_directory
from .safeopen import no_follow, open_file

RECORD_LOST = "record-lost"
LENGTH_REPAIRED = "length-repaired"
RECORDS_UNPLACED = "records-unplaced"
OFFSETS_SKIPPED = "offsets-skipped"
UNREADABLE = "unreadable"            # the damage record itself could not be read
KINDS = (RECORD_LOST, LENGTH_REPAIRED, RECORDS_UNPLACED, OFFSETS_SKIPPED, UNREADABLE)
_MAX_BYTES = 1 << 20                 # more than this is not a damage record this store wrote

log = logging.getLogger("commitlog")


def entry(segment: str, position: int | None, nbytes: int, kind: str,
          offsets: tuple[int, int] | None, detail: str, saved: str | None = None) -> dict:
    """One entry; `segment` is a path (its file name is kept)."""
    now = time.time()
    name = os.path.basename(segment)
    return {"id": f"{name}:{position}:{time.time_ns()}", "kind": kind,
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)), "segment": name,
            "position": position, "bytes": nbytes,
            "offsets": list(offsets) if offsets is not None else None, "saved": saved,
            "detail": detail}


def record_damage(directory: str, entries: list[dict]) -> None:
    """Add `entries` to the log's damage record, durably, each logged at ERROR; a record that
    cannot be written (a full disk) is logged at ERROR too, and the open goes on. A symbolic link
    at either name is never followed: named at ERROR and replaced (a record unreadable so too)."""
    for e in entries:
        log.error("damaged log segment %s%s: %s (%s; offsets %s)%s",
                  os.path.join(directory, e["segment"]),
                  "" if e["position"] is None else f" at byte {e['position']}", e["detail"], e["kind"],
                  "unknown" if e["offsets"] is None else "[%d, %d)" % tuple(e["offsets"]),
                  f"; bytes saved in {e['saved']}" if e["saved"] else "")
    if not entries:
        return
    kept = []
    for e in read_damage(directory):
        if e.get("kind") == UNREADABLE:
            log.error("%s; replaced by a new record", e["detail"])
        else:
            kept.append(e)
    path = damage_path(directory)
    tmp = path + TMP_SUFFIX
    try:
        with contextlib.suppress(FileNotFoundError):
            if os.path.islink(tmp):
                log.error("removed a symbolic link planted at %s (never followed): find out who "
                          "planted it", tmp)
            os.unlink(tmp)
        with os.fdopen(open_file(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "w") as f:
            json.dump({"format": 1, "entries": kept + entries}, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_directory(directory)
    except (OSError, UnsafeLogFileError) as exc:  # a full disk, a planted link: the writer opens
        log.error("could not write %s (%s): the damage above is named only in this log", path, exc)


def read_damage(directory: str) -> list[dict]:
    """The entries of the log's damage record ([] when there is none)."""
    path = damage_path(directory)
    try:
        with open(path, "rb", opener=no_follow) as f:
            raw = f.read(_MAX_BYTES + 1)
    except FileNotFoundError:
        return []
    except UnsafeLogFileError as exc:
        return [_unreadable(str(exc))]
    except OSError as exc:
        return [_unreadable(f"cannot open it: {exc.strerror}")]
    try:
        if len(raw) > _MAX_BYTES:
            raise ValueError(f"more than {_MAX_BYTES} bytes")
        entries = json.loads(raw)["entries"]
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise ValueError("entries is not a list of objects")
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        return [_unreadable(str(exc)[:120])]
    return entries


def _unreadable(why: str) -> dict:
    return {"id": f"{DAMAGE_FILE}:unreadable", "kind": UNREADABLE, "time": None, "segment": None,
            "position": None, "bytes": 0, "offsets": None, "saved": None,
            "detail": f"{DAMAGE_FILE} is unreadable ({why}): the damage it named is unknown"}


def describe(e: dict) -> str:
    """One line naming an entry, for health and audit."""
    where = f"{e.get('segment')} byte {e.get('position')}" if e.get("segment") else DAMAGE_FILE
    offsets = e.get("offsets")
    span = f", offsets [{offsets[0]}, {offsets[1]})" if isinstance(offsets, list) and len(offsets) == 2 \
        else ""
    return f"{e.get('kind')} at {where}{span}: {e.get('detail')}"
