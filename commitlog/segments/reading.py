"""Reading and scanning: a record by offset (index floor, then a short scan) and the chunked scan
whose inner loop decodes records with the frame's numbers bound to locals.

Functions over a SegmentList; thread-safe as it is (a scan iterator has one consumer at a time).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from itertools import chain

from .. import record as rec
from ..errors import CorruptLogError, OffsetOutOfRangeError, OffsetRemovedError
from ..record import Record
from . import gapcheck
from .segment_list import ACTIVE, LIVE, SEALED, SegmentList

SCAN_CHUNK = 1 << 18                 # bytes a scan reads ahead into one list of records
_HEADER_UNPACK_FROM = rec.HEADER.unpack_from
_NO_END = 1 << 63
_GAP = rec.ATTR_GAP


def read(segs: SegmentList, offset: int) -> Record:
    """The record at `offset` (a non-negative int, checked by the caller); OffsetRemovedError
    when it is dead (marked, written dead, or in a compaction's gap)."""
    try:
        base, mm, ino = _acquire(segs, offset)
    except OffsetOutOfRangeError:
        if gapcheck.retained_start(segs) <= offset < segs.start():
            # Retention kept it, but a compaction removed every segment before the first one.
            raise _removed(segs, offset) from None
        raise
    path = segs.segment_path(base)
    ended = None
    try:
        segs.marks.refresh()
        limit, kind, floor = segs.view_limits(base, mm, ino)
        gapcheck.check_place(segs, base, ino, mm)
        rel, pos = floor(offset - base)
        current = base + rel
        while True:
            r = rec.decode_at(mm, pos, limit)
            if r.status != rec.OK:
                if r.status == rec.BAD and kind != LIVE:
                    raise _corrupt(path, pos, r.status, offset, current)
                if kind == LIVE and _damaged(segs, base, mm, pos, limit):
                    raise _corrupt(path, pos, r.status, offset, current)
                if r.status == rec.END or (r.status == rec.EMPTY and kind == SEALED):
                    ended = current
                    break  # past this segment's end: a gap up to the next segment
                if segs.readonly:
                    segs.catch_up()
                raise segs.out_of_range(offset)
            attrs = r.attributes
            if attrs & _GAP:
                current += rec.gap_span(mm, r.value_start)
                pos = r.next_position
                if current > offset:
                    break
                continue
            current += r.delta  # the offsets a compaction removed before this record
            if current > offset:
                break
            if current == offset:
                if attrs & rec.ATTR_SKIP or segs.marks.is_marked(offset):
                    break
                return _record(mm, current, r)
            current += 1
            pos = r.next_position
    finally:
        segs.release(base)
    if ended is not None and offset >= ended:
        bases = segs.bases
        i = bisect_right(bases, offset)
        if i < len(bases):
            gapcheck.check_gap(segs, ended, bases[i], base, bases[i])
    raise _removed(segs, offset)


def _damaged(segs: SegmentList, base: int, mm, pos: int, limit: int) -> bool:
    """Whether the unverified bytes at `pos` of the last segment, which another process may be
    writing, are damage: still unverified once records after them are known to verify. A record
    in flight is the last one; one the writer finished meanwhile verifies when decoded again."""
    if segs.live_summary(base).used_bytes <= pos:
        return False
    return rec.decode_at(mm, pos, limit).status != rec.OK


def _corrupt(path: str, pos: int, status: int, wanted: int, at: int) -> CorruptLogError:
    """The error for the bytes at `pos`, where the record of offset `at` should be, found while
    reading offset `wanted`."""
    what = "record checksum or length does not verify" if status == rec.BAD else \
        "unwritten bytes where a record should be"
    also = "" if wanted == at else f", reading offset {wanted}"
    return CorruptLogError(path, pos, f"{what} (the record of offset {at}{also}; the records "
                                      f"after it in this segment cannot be read)")


def _acquire(segs: SegmentList, offset: int) -> tuple:
    """Hold the segment holding `offset`: (base, mapping, inode); release it with
    `segs.release(base)`. A segment gone between the lookup and the hold (a compaction merged it
    into the one before, in another handle or process) is looked up again."""
    for attempt in range(3):
        base = segs.locate(offset)
        try:
            return (base, *segs.acquire(base))
        except FileNotFoundError:
            segs.refresh()
            if attempt == 2:
                raise segs.out_of_range(offset) from None


def _removed(segs: SegmentList, offset: int) -> OffsetRemovedError:
    """The error for a dead `offset`, naming the next live one (found by a scan, which skips
    dead records and gaps)."""
    it = scan(segs, max(offset + 1, segs.start()), None, False)
    try:
        nxt = next(iter(it), None)
    finally:
        it.close()
    end = segs.end()
    why = "was marked dead" if segs.marks.is_marked(offset) else \
        "holds no live record (written dead, or removed by a compaction)"
    return OffsetRemovedError(offset, end if nxt is None else nxt.offset, segs.start(), end, why)


def scan(segs: SegmentList, offset: int, end: int | None, zero_copy: bool) -> "Scan":
    return Scan(_scan(segs, offset, end, zero_copy))


def _scan(segs: SegmentList, offset: int, end: int | None,
          zero_copy: bool) -> Iterator[list[Record]]:
    stop = end if end is not None else _NO_END
    recheck = None
    while offset < stop:
        if segs.readonly or offset >= segs.end():
            segs.refresh()
        if not segs.bases or offset > (_NO_END if segs.readonly else segs.end()):
            return
        try:
            base, mm, ino = _acquire(segs, offset)
        except OffsetOutOfRangeError:
            if offset >= segs.start():
                return
            if offset >= gapcheck.retained_start(segs):
                offset = segs.start()  # a compaction removed the head segments since: passed
                continue
            raise
        try:
            size = 0 if mm is None else len(mm)
            marks = segs.marks
            marks.refresh()
            limit, kind, floor = segs.view_limits(base, mm, ino)
            gapcheck.check_place(segs, base, ino, mm)
            rel, pos = floor(offset - base)
            pos, current, ready = _seek(mm, pos, limit, base + rel, offset)
            if ready:
                while True:
                    first = current
                    records, pos, current = read_records(mm, pos, limit, current, stop, zero_copy)
                    if records and marks.starts and marks.any_in(first, current):
                        records = [r for r in records if not marks.is_marked(r.offset)]
                    if records:
                        yield records
                    elif first == current:
                        break
            status, kind = _where_stopped(segs, base, mm, pos, limit, kind) if current < stop \
                else (rec.OK, kind)
        finally:
            segs.release(base)
        if current >= stop:
            return
        if status == rec.OK:
            offset = max(offset, current)  # the writer added a record after our read stopped
            continue
        if status in (rec.BAD, rec.EMPTY):
            if kind == LIVE:
                return  # the writer's record in flight, a torn tail, or the end written so far
            raise _corrupt(segs.segment_path(base), pos, status, current, current)
        # The end of this segment: go on in the next one, if there is one.
        if kind == ACTIVE:
            active = segs.active
            if active is not None and active.base_offset == base:
                return  # the end of the log as of this step
            offset = max(offset, current)  # rolled meanwhile: read the rest of it as sealed
            continue
        nxt, recheck = _next_base(segs, base, size, current, recheck)
        if nxt is None:
            return  # sealed and nothing after it yet (a crash or a full disk at the roll)
        offset = max(offset, nxt)


def _where_stopped(segs: SegmentList, base: int, mm, pos: int, limit: int, kind: int) -> tuple[int, int]:
    """(what decoding found at byte `pos` where a read of segment `base` stopped, the segment's
    kind): records that verify after a bad one in the live segment are damage, not a write in
    flight (the kind becomes SEALED); an empty tail at the segment's limit is its END."""
    status = rec.decode_at(mm, pos, limit).status
    if status != rec.OK and kind == LIVE and _damaged(segs, base, mm, pos, limit):
        kind = SEALED     # records verified after this one: damage, not in flight
    if status == rec.EMPTY and kind != LIVE and pos >= limit:
        status = rec.END  # read up to its sealed length, or the writer's position
    return status, kind


def _seek(mm, pos: int, limit: int, current: int, offset: int) -> tuple[int, int, bool]:
    """From the index entry at byte `pos` (offset `current`) to the first record wanted by a read
    from `offset`: (its byte, its offset, whether it was reached before the data ended)."""
    ready = current >= offset
    while not ready:
        r = rec.decode_at(mm, pos, limit)
        if r.status != rec.OK:
            break
        # A gap, or a record's delta, may pass `offset`: reading goes on from there.
        if r.attributes & _GAP:
            current += rec.gap_span(mm, r.value_start)
            pos = r.next_position
            ready = current >= offset
        elif current + r.delta >= offset:
            ready = True  # this record is the first wanted one
        else:
            current += r.delta + 1
            pos = r.next_position
            ready = current >= offset
    return pos, current, ready


def _next_base(segs: SegmentList, base: int, size: int, current: int,
               recheck: tuple[int, int] | None) -> tuple[int | None, tuple[int, int] | None]:
    """Where a read that reached the end `current` of sealed segment `base` (`size` bytes) goes
    on: (the next offset to read from, None at the log's end; the recheck marker). An overlap,
    or a gap no compaction recorded, raises CorruptLogError."""
    if segs.readonly:
        segs.refresh()
    # A base below `current` is a merged input a compaction's swap has not unlinked yet
    # (this segment, its shorter output, covers it now); a base above it starts after a gap.
    bases = segs.bases
    i = bisect_right(bases, base)
    if size == segs.segment_size and i < len(bases) and bases[i] < current:
        raise gapcheck.overlap(segs, base, current, size, bases[i])
    i = bisect_left(bases, current, i)
    nxt = bases[i] if i < len(bases) else None
    if nxt is None or nxt <= current:
        return nxt, recheck
    if recheck != (base, current):
        # Read once more from here: a compaction's output may have replaced this file (the one
        # held is the old one), covering what follows.
        return current, (base, current)
    gapcheck.check_gap(segs, current, nxt, base, nxt)
    return nxt, recheck


def read_records(mm, pos: int, limit: int, current: int, stop: int, zero_copy: bool):
    """Verified records from `pos` until `stop`, about SCAN_CHUNK bytes, or the first position
    without one; returns (records, position, offset) where it stopped. The hot loop of scan."""
    unpack = _HEADER_UNPACK_FROM
    crc32 = rec.crc32
    frame, min_body, key_at = rec.FRAME_SIZE, rec.BODY_HEAD_SIZE, rec.HEADER_SIZE
    gap, delta_bit, dead = _GAP, rec.ATTR_DELTA, rec.ATTR_DEAD
    special = gap | delta_bit | dead
    unpack_span, delta_size = rec.SPAN.unpack_from, rec.DELTA_SIZE
    min_delta_body = min_body + delta_size
    new = tuple.__new__
    out: list[Record] = []
    add = out.append
    view = memoryview(mm) if zero_copy and mm is not None else mm  # view[a:b]: a copy or a view
    bound = min(limit - key_at + 1, pos + SCAN_CHUNK)  # a header fits, and the chunk
    while pos < bound and current < stop:
        length, crc, attrs, ts, klen = unpack(mm, pos)
        nxt = pos + frame + length
        if length < min_body or nxt > limit or crc32(mm[pos + frame:nxt]) != crc \
                or klen > length - min_body:
            break
        ks = pos + key_at
        if attrs & special:  # written dead, a gap, or an offset delta (one test for them all)
            if attrs & gap:  # a format-1 compaction's gap: passed, never returned
                if klen != -1 or length != min_body + 8 or attrs & delta_bit:
                    break  # not a gap compaction wrote: corrupt
                current += unpack_span(mm, ks)[0]
                pos = nxt
                continue
            if attrs & delta_bit:
                if length < min_delta_body or klen > length - min_delta_body:
                    break
                current += unpack_span(mm, ks)[0]
                if current >= stop:
                    break  # this record and the rest are past the scan's end
                ks += delta_size
                attrs ^= delta_bit  # the store's bit, not the record's
            if attrs & dead:  # written dead: passed, never returned
                current += 1
                pos = nxt
                continue
        if klen > 0:
            key = mm[ks:ks + klen]
            ks += klen
        else:
            if klen < -1:
                break
            key = None if klen else b""
        add(new(Record, (current, ts, key, view[ks:nxt], attrs)))
        current += 1
        pos = nxt
    return out, pos, current


class Scan:
    """The iterator `scan` returns. A for-loop over it runs C-level (itertools.chain over lists
    of records read a chunk at a time), not one generator resumption per record; `close()`
    releases the held segment at once. One consumer at a time (not thread-safe)."""

    __slots__ = ("_chunks", "_records")

    def __init__(self, chunks: Iterator[list[Record]]) -> None:
        self._chunks = chunks
        self._records = chain.from_iterable(chunks)

    def __iter__(self) -> Iterator[Record]:
        return self._records

    @property
    def chunks(self) -> Iterator[list[Record]]:
        """The lists of records it yields from, for a caller chaining scans (a tiered log's)."""
        return self._chunks

    def __next__(self) -> Record:
        return next(self._records)

    def close(self) -> None:
        self._chunks.close()


def _record(mm, offset: int, r: rec.DecodeResult) -> Record:
    key = None if r.key_start < 0 else bytes(mm[r.key_start:r.key_end])
    return Record(offset, r.timestamp_ms, key, bytes(mm[r.value_start:r.value_end]),
                  r.attributes & ~rec.ATTR_DELTA)
