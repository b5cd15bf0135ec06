"""The writer's side of an open log: rolling from one active segment to the next (sealing the old,
taking a prepared one, asking for the next), and the batch append loops that hand chunks to the
active segment between disk checks and rolls.

Time-based rolls (`roll_after`, Kafka's segment.ms): a segment whose first record is that old is
sealed short (`ActiveSegment.seal_short`: its unused tail given back) at the next append, or by the
log's background thread while the writer is idle; the next append starts a new segment. The age is
counted from the wall clock at the segment's first append, or from its first record's timestamp for
a segment found at open (the only clock left), never from a caller's timestamps otherwise, so a
backfill with old timestamps does not roll a segment per record.

Used by CommitLog with its lock held: not thread-safe on its own. CommitLog.append inlines the
single-record path (see `append_locked` for the same steps) to keep the hot path one call deep.
"""

from __future__ import annotations

import bisect
import logging
import struct
import time
from array import array
from itertools import accumulate, repeat
from operator import add as _add

from .. import record as rec
from ..segments.active import UNIFORM_CRCS, ActiveSegment, cut_short
from ..segments.index import SegmentSummary
from ..arguments import check_batch, check_record
from ..errors import InvalidArgumentError, RecordTooLargeError
from .guard import DiskGuard
from ..segments.prealloc import SegmentPreallocator
from ..segments.segment_list import SegmentList
from ..state import LogState

_BATCH_CHUNK = 1 << 20                # bytes framed in memory before one copy into the mapping
_crc32 = rec.crc32
_time_ns = time.time_ns
BAD_RECORD = (TypeError, struct.error, OverflowError)  # what a record of the wrong type raises
log = logging.getLogger("commitlog")


class Writer:
    """See the module docstring."""

    def __init__(self, path: str, segment_size: int, segs: SegmentList, state: LogState,
                 guard: DiskGuard, preallocator: SegmentPreallocator, *, durable: bool,
                 sync: bool, roll_after: float | None = None) -> None:
        self.path = path
        self.segment_size = segment_size
        self._segs = segs
        self._state = state
        self._guard = guard
        self.preallocator = preallocator
        self._durable = durable  # rolls msync and fsync only when flushing is asked for
        self._sync = sync
        self.roll_after_ns = None if roll_after is None else int(roll_after * 1e9)
        self._uncut: list[tuple[str, SegmentSummary]] = []  # sealed short, not cut: a reader held it

    def append_batch(self, values: list, ts: int, attributes: int, now_ns: int, first: int) -> int:
        """Records without keys, one timestamp; `first`: the offset the first one gets."""
        segs = self._segs
        if not values:
            return first
        try:  # every value's type is checked here, before anything is written
            head = rec.BODY_HEAD.pack(attributes, ts, -1)
            head_crc = _crc32(head)
            sizes = list(map(len, values))
            crcs = array("I", map(_crc32, values, repeat(head_crc)))
        except BAD_RECORD:
            check_batch(values, ts, attributes)
            raise
        if UNIFORM_CRCS and sizes.count(sizes[0]) == len(sizes):
            self._append_uniform(values, sizes[0], crcs, head, ts, now_ns)
            return first
        guard = self._guard
        # cum[k]: bytes before record k in this batch, so record k spans cum[k]..cum[k+1].
        cum = [0]
        cum += accumulate(map(_add, sizes, repeat(rec.HEADER_SIZE)))
        i, n = 0, len(values)
        while i < n:
            if guard.refusing or not guard.checked_ns <= _time_ns() < guard.due_ns:
                guard.check()
            seg = segs.active
            room = 0 if seg is None else seg.size - seg.position
            j = bisect.bisect_right(cum, cum[i] + min(room, _BATCH_CHUNK), lo=i) - 1
            if j <= i:
                if seg is not None and room >= cum[i + 1] - cum[i]:
                    j = i + 1  # one record bigger than a chunk still fits
                else:
                    self.roll(cum[i + 1] - cum[i])
                    continue
            seg.write_chunk(values, sizes, crcs, cum, i, j, head, ts, now_ns)
            i = j
        if self._sync:
            segs.active.flush()
        return first

    def append_many(self, values: list, keys: list | None, timestamp_ms: int | None, attributes: int,
                    now_ns: int) -> int:
        """`CommitLog.append_batch` with `_lock` held: the records, one timestamp (None: now), each
        checked before the first is written when keyed; returns the offset of the first."""
        segs = self._segs
        ts = now_ns // 1_000_000 if timestamp_ms is None else timestamp_ms
        seg = segs.active
        if seg is not None and now_ns >= seg.roll_due_ns:
            self.roll_by_time(seg, now_ns)
        first = segs.end()
        if keys is None:
            return self.append_batch(values, ts, attributes, now_ns, first)
        if len(keys) != len(values):
            raise InvalidArgumentError(f"keys has {len(keys)} items for {len(values)} values")
        for i, (value, key) in enumerate(zip(values, keys)):
            check_record(value, key, ts, attributes, f" [{i}] of the batch")
        for value, key in zip(values, keys):
            self.append_locked(value, key, ts, attributes, now_ns)
        return first

    def flush_due(self, flush: bool, now_ns: int) -> None:
        """The log's background thread's turn, with `_lock` held: the active segment's dirty pages
        written (`flush`: async flushing) and an idle segment rolled when due."""
        active = self._segs.active
        if flush and active is not None and active.dirty():
            active.flush()
        if self.roll_after_ns is not None:
            self.roll_if_due(now_ns)

    def append_locked(self, value, key, ts: int, attributes: int, now_ns: int) -> int:
        """One record with `_lock` held (keyed batches); append() inlines the same steps."""
        guard = self._guard
        if guard.refusing or not guard.checked_ns <= _time_ns() < guard.due_ns:
            guard.check()
        seg = self._segs.active
        offset = -1 if seg is None else seg.append(value, key, ts, attributes, now_ns)
        if offset < 0:  # keyed batches were checked before the first record
            seg = self.roll(rec.HEADER_SIZE + len(value) + (0 if key is None else len(key)))
            offset = seg.append(value, key, ts, attributes, now_ns)
        if self._sync:
            seg.flush()
        return offset

    def _append_uniform(self, values: list, size: int, crcs: array, head: bytes, ts: int,
                        now_ns: int) -> None:
        """append_batch for records of one value size (the common case), a chunk at a time."""
        segs, guard = self._segs, self._guard
        rsize = rec.HEADER_SIZE + size
        sep = bytearray(rec.FRAME.pack(rec.BODY_HEAD_SIZE + size, 0) + head)
        i, n = 0, len(values)
        while i < n:
            if guard.refusing or not guard.checked_ns <= _time_ns() < guard.due_ns:
                guard.check()
            seg = segs.active
            room = 0 if seg is None else seg.size - seg.position
            k = min(room, _BATCH_CHUNK) // rsize
            if k == 0:
                if room < rsize:
                    self.roll(rsize)
                    continue
                k = 1  # one record bigger than a chunk still fits
            k = min(k, n - i)
            seg.write_uniform(values[i:i + k], crcs[i:i + k].tobytes(), rsize, sep, ts, now_ns)
            i += k
        if self._sync:
            segs.active.flush()

    def roll(self, need: int) -> ActiveSegment:
        """Seal the active segment and start the next, from a prepared one when ready."""
        if need > self.segment_size:
            raise RecordTooLargeError(
                f"a record of {need} bytes (with its {rec.HEADER_SIZE}-byte header) cannot fit in "
                f"a segment of {self.segment_size} bytes in {self.path}")
        segs = self._segs
        if self._uncut:
            self.finish_cuts()
        old = segs.retire_active()
        if old is not None:
            segs.sealed(old.base_offset, old.seal(durable=self._durable, close_mapping=False))
            self.preallocator.retire(old.mm)
        # What other processes removed from the head goes from memory here, once per segment.
        segs.forget_below(self._state.start_offset())
        self._guard.check()
        prepared = self.preallocator.take()
        seg = ActiveSegment.create(self.path, segs.end(), self.segment_size, prepared,
                                   durable=self._durable)
        segs.activate(seg)
        if self.roll_after_ns is not None:
            seg.roll_due_ns = _time_ns() + self.roll_after_ns  # its first record is written now
        self.preallocator.request()
        return seg

    # ------------------------------------------------------------------ time-based rolls
    def adopt(self, seg: ActiveSegment | None) -> None:
        """`seg`, found at open, is the active segment: its roll falls due by its first record's
        timestamp (0 for an empty one: set at its first append)."""
        if seg is not None and self.roll_after_ns is not None:
            first_ts = seg.summary().first_timestamp_ms if seg.count else None
            seg.roll_due_ns = 0 if first_ts is None else first_ts * 1_000_000 + self.roll_after_ns

    def roll_by_time(self, seg: ActiveSegment, now_ns: int) -> ActiveSegment | None:
        """An append found `seg`'s roll due (`now_ns` at or past `roll_due_ns`): an empty segment's
        clock starts now; one with records is sealed short and None returned (the append rolls)."""
        if not seg.count:
            seg.roll_due_ns = now_ns + self.roll_after_ns
            return seg
        self.seal_by_time(now_ns)
        return None

    def roll_if_due(self, now_ns: int) -> bool:
        """The idle writer's roll, from the log's background thread: True when it sealed. Segments
        sealed short while a reader held them are cut here once it lets go."""
        if self._uncut:
            self.finish_cuts()
        seg = self._segs.active
        if seg is None or not seg.count or now_ns < seg.roll_due_ns:
            return False
        self.seal_by_time(now_ns)
        return True

    def seal_by_time(self, now_ns: int) -> None:
        """Seal the active segment short; what was prepared ahead goes back too, so an idle writer
        holds no more disk than its records (the next append prepares again)."""
        segs = self._segs
        old = segs.retire_active()
        summary, cut = old.seal_short()
        segs.sealed(old.base_offset, summary)
        if not cut:
            log.info("left %s whole: a reader holds it; cut once it lets go", old.path)
            self._uncut.append((old.path, summary))
        self.preallocator.release_ready()
        log.info("rolled %s after %.0f s: %d records, %d of %d bytes kept", old.path,
                 (now_ns - (old.roll_due_ns - self.roll_after_ns)) / 1e9, summary.record_count,
                 summary.used_bytes + rec.LENGTH_SIZE, self.segment_size)

    def finish_cuts(self) -> None:
        """Cut the segments sealed short that a reader held then, now that none does; one that
        cannot be cut (a read-only remount, say) stays whole, logged, for the next try."""
        left = []
        for path, summary in self._uncut:
            try:
                if cut_short(path, summary):
                    continue
            except OSError as exc:
                log.warning("could not cut %s, sealed short: %s", path, exc)
            left.append((path, summary))
        self._uncut = left

    def skip_to(self, offset: int) -> tuple[int, int] | None:
        """Make `offset` the next offset given out when the log ends before it (consumer groups
        committed past the end a recovery found): a gap record stands for the offsets between,
        in the active segment or a new one. Returns the offsets skipped, or None."""
        segs = self._segs
        end = segs.end()
        if offset <= end:
            return None
        seg = segs.active
        if seg is None or not seg.append_gap(offset - end):
            seg = self.roll(rec.HEADER_SIZE + rec.SPAN.size)
            seg.append_gap(offset - end)
        return end, offset

    def release_prepared(self) -> None:
        """Writes are refused: segments prepared ahead hold disk the writer may not use now."""
        if self.preallocator.release_ready():
            self._guard.due_ns = 0  # re-read the disk at the next append
