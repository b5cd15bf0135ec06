"""`commitlog dump PATH`: records as JSON lines, one object per record:

    {"offset", "timestamp_ms", "timestamp", "attributes", "key", "key_encoding", "value", "value_encoding"}

key and value are UTF-8 text where they decode (`*_encoding` "utf-8"), base64 otherwise
("base64"); a record without a key has key and key_encoding null. Records are read as a consumer
reads them (`CommitLog.scan`): dead records and a compaction's gaps are passed over.

`--follow` tails a log being written: it polls the end offset, and stops cleanly (status 0) on
SIGINT or SIGTERM, and when its standard output is closed (a reader such as `head` gone: a
broken pipe, seen even while no record comes).
"""

from __future__ import annotations

import base64
import json
import select
import signal
import sys
import time

from ..errors import OffsetOutOfRangeError
from ..log import CommitLog
from ..record import Record
from .inputs import UsageError
from .printing import iso_ms

__all__ = ["Stopped", "dump", "record_json", "start_offset"]

POLL_SECONDS = 0.2
_BATCH = 512               # lines written at a time


class Stopped(Exception):
    """SIGINT, SIGTERM, or a closed standard output: a follow ends here, cleanly."""


def _text(data: bytes | None) -> tuple[str | None, str | None]:
    if data is None:
        return None, None
    try:
        return bytes(data).decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), "base64"


def record_json(r: Record) -> str:
    """One record as its JSON line (no newline)."""
    key, key_encoding = _text(r.key)
    value, value_encoding = _text(r.value)
    return json.dumps({"offset": r.offset, "timestamp_ms": r.timestamp_ms, "timestamp": iso_ms(r.timestamp_ms),
                       "attributes": r.attributes, "key": key, "key_encoding": key_encoding,
                       "value": value, "value_encoding": value_encoding}, ensure_ascii=False)


def start_offset(log: CommitLog, offset: int | None, since_ms: int | None, follow: bool) -> int:
    """Where a dump starts: `offset` (--from), the first record at or after `since_ms` (--since;
    the end when none is that late yet), else the log's start. UsageError for an offset outside
    the log (past its end is allowed with `follow`: it waits for it)."""
    start, end = log.start_offset, log.end_offset
    if offset is not None:
        if offset < start and offset < log.retention_start_offset:
            raise UsageError(f"--from {offset}: removed by retention; {log.path} holds offsets [{start}, {end})")
        if offset > end and not follow:
            raise UsageError(f"--from {offset}: not written yet; {log.path} holds offsets [{start}, {end})")
        return max(offset, start)
    if since_ms is not None:
        found = log.offset_for_time(since_ms)
        return end if found is None else found
    return start


def dump(log: CommitLog, first: int, count: int | None, follow: bool, out=None) -> int:
    """Write the records from `first` as JSON lines to `out` (stdout): `count` at most, up to the
    end (with `follow`, then as they come, until stopped). Returns how many were written."""
    out = sys.stdout if out is None else out
    written, offset = 0, first
    watch = _closed_watch(out) if follow else None
    while True:
        end = log.end_offset
        if offset < end:
            written, offset = _write_range(log, offset, end, count, written, out)
            out.flush()
        if (count is not None and written >= count) or not follow:
            return written
        if watch is not None and watch.poll(POLL_SECONDS * 1000):
            raise Stopped()     # the reader of our output is gone
        if watch is None:
            time.sleep(POLL_SECONDS)


def _write_range(log: CommitLog, offset: int, end: int, count: int | None, written: int, out) -> tuple[int, int]:
    """Records [offset, end) to `out`, up to `count` in all; (written, next offset)."""
    try:
        scan = log.scan(offset, end)
    except OffsetOutOfRangeError:
        start = log.start_offset       # removed by retention meanwhile: on from the start
        print(f"commitlog: dump: offsets [{offset}, {start}) were removed by retention while "
              f"following; going on from {start}", file=sys.stderr)
        return written, start
    lines = []
    try:
        for r in scan:
            lines.append(record_json(r))
            written += 1
            if count is not None and written >= count:
                end = r.offset + 1
                break
            if len(lines) >= _BATCH:
                out.write("\n".join(lines) + "\n")
                lines.clear()
    finally:
        scan.close()
    if lines:
        out.write("\n".join(lines) + "\n")
    return written, end


def _closed_watch(out):
    """A poll object reporting when `out` (a pipe or socket) is closed at its other end, or None
    when it has no descriptor to watch."""
    try:
        fd = out.fileno()
    except (AttributeError, OSError, ValueError):
        return None
    watch = select.poll()
    watch.register(fd, 0)       # no events asked: only POLLERR / POLLHUP are reported
    return watch


def stop_on_signals() -> None:
    """SIGINT and SIGTERM end a follow through Stopped."""
    def stop(signum, _frame):
        raise Stopped()
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
