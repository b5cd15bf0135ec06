"""A compaction output being written (commitlog.cleanup.rewrite drives it): the records kept, each
moved past a removed run carrying its offset delta, the gap record where a removed run ends an
input, index entries every INDEX_INTERVAL bytes, buffered writes reported to `on_bytes`.

One per output, used by one thread; the file is the caller's `.cleaned` path until the swap.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from .. import record as rec
from ..errors import InvalidArgumentError
from ..safeopen import temporary
from ..segments.index import INDEX_INTERVAL, SegmentSummary

_FLUSH = 1 << 20                      # bytes buffered before a write, and between on_bytes calls


class OutputWriter:
    """A compaction output being written: buffered writes, an offset delta on a kept record that
    does not follow the last (and off one that now does), index entries every INDEX_INTERVAL
    bytes."""

    def __init__(self, path: str, base: int, segment_size: int,
                 on_bytes: Callable[[int], None] | None) -> None:
        self.path, self.base, self.limit = path, base, segment_size - rec.LENGTH_SIZE
        self.fd = temporary(path, os.O_WRONLY)
        self.buf = bytearray()
        self.size = 0            # bytes of records written or buffered
        self.next = base         # the offset the next record would have without a delta
        self.next_index_at = INDEX_INTERVAL
        self.rels: list[int] = []
        self.positions: list[int] = []
        self.first_ts: int | None = None
        self.last_ts = 0
        self.read = 0
        self.reported = 0
        self.kept_marked = False  # a record marked dead was kept (the caller's rule protected it)
        self.on_bytes = on_bytes

    def _put(self, rel: int, data) -> None:
        pos = self.size
        if pos + len(data) > self.limit:
            raise InvalidArgumentError(f"the live records of this run do not fit in one segment "
                                       f"({pos + len(data)} bytes); compact fewer segments at once")
        if pos >= self.next_index_at:
            self.rels.append(rel)
            self.positions.append(pos)
            self.next_index_at = pos + INDEX_INTERVAL
        self.buf += data
        self.size = pos + len(data)
        if len(self.buf) >= _FLUSH:
            self._flush()

    def record(self, offset: int, framed, ts: int) -> None:
        """Write the verified record `framed`, carrying the delta from `next` to `offset`."""
        # An index entry's offset is the one counted before the record's delta, as a reader
        # starting there counts.
        self._put(self.next - self.base, framed)
        self.next = offset + 1
        if self.first_ts is None:
            self.first_ts = ts
        self.last_ts = ts

    def progress(self, read: int) -> None:
        """Bytes read so far: reported (with those written) once a megabyte has passed."""
        self.read = read
        if self.on_bytes is not None and read - self.reported >= _FLUSH:
            self.on_bytes(read - self.reported)
            self.reported = read

    def _flush(self) -> None:
        view = memoryview(self.buf)
        while view:
            view = view[os.write(self.fd, view):]
        written = len(self.buf)
        self.buf = bytearray()
        if self.on_bytes is not None:
            self.on_bytes(written + self.read - self.reported)
            self.reported = self.read

    def hold_last_offset(self, end: int) -> None:
        """When the offsets before `end` were removed up to the last record written: a gap
        record for them (as Kafka's cleaner keeps an empty last batch), so that the data says
        where the input ends. The only gap record a format-2 compaction writes."""
        if end > self.next:
            self._put(self.next - self.base, rec.encode_gap(end - self.next))
            self.next = end

    def finish(self, end: int, mtime_ns: int, marks_seq: int) -> SegmentSummary:
        """The last offset held, the end marker, fsync; the output's sealed summary."""
        self.hold_last_offset(end)
        self.buf += rec.LENGTH.pack(rec.END_MARKER)
        self._flush()
        os.fsync(self.fd)
        os.utime(self.fd, ns=(mtime_ns, mtime_ns))  # age is the inputs' last write, not now
        ino = os.fstat(self.fd).st_ino
        os.close(self.fd)
        self.fd = -1
        return SegmentSummary(self.size, end - self.base, self.first_ts or 0, self.last_ts,
                              mtime_ns, tuple(self.rels), tuple(self.positions), True,
                              ino & 0xFFFFFFFF, marks_seq, bool(self.kept_marked), self.base)

    def discard(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if os.path.exists(self.path):
            os.unlink(self.path)

