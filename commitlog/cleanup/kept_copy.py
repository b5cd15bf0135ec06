"""Compaction's hot loop: copy the records of one mapped sealed segment that the caller's rule
keeps into an output, each checked against its CRC, framed anew where its offset delta changes.

Records of `rec.COMBINE_MIN` bytes or more are verified by way of their head's CRC, so the new
frame's CRC is combined from the two instead of computed over the bytes again (the figures:
docs/performance.md). Why a dropped record is not checked: docs/concepts.md. Pure over its
arguments; the caller holds the segment and serialises compactions.
"""

from __future__ import annotations

from collections.abc import Callable

from .. import record as rec
from ..errors import CorruptLogError
from .marks_snapshot import MarksSnapshot
from .output import OutputWriter

Decide = Callable[[int, "bytes | None", bool, bool], "str | None"]


def copy_kept(mm, view: memoryview, limit: int, base: int, path: str, decide: Decide,
               marks: MarksSnapshot, writer: OutputWriter, dropped: dict[str, int]) -> tuple[int, int]:
    """The hot loop of a compaction: walk segment `base` (mapped as `mm`, `view`, up to `limit`),
    copy what `decide` keeps into `writer` CRC-checked (framed anew where its delta changes);
    returns (where the walk ended, records kept). Why a dropped record is not checked: docs."""
    unpack, span_of, special = rec.HEADER.unpack_from, rec.SPAN.unpack_from, rec.ATTR_RESERVED
    crc32, reframed, combine_min = rec.crc32, rec.reframed, rec.COMBINE_MIN
    frame, min_body, key_at = rec.FRAME_SIZE, rec.BODY_HEAD_SIZE, rec.HEADER_SIZE
    gap, dead, delta_size, end_marker = rec.ATTR_GAP, rec.ATTR_DEAD, rec.DELTA_SIZE, rec.END_MARKER
    i, mark_start, mark_end = marks.range_from(base)     # the first marked range ending after `base`
    read0, kept, dropping, run, pos, current, bound = writer.read, 0, None, 0, 0, base, limit - key_at
    while pos <= bound:
        length, crc, attrs, ts, klen = unpack(mm, pos)
        nxt = pos + frame + length
        if length < min_body or nxt > limit or klen < -1 or klen > length - min_body:
            if length == 0 or length == end_marker:
                break
            raise CorruptLogError(path, pos, "record length does not verify")
        ks, head = pos + key_at, min_body
        if attrs & special:
            if attrs & gap:  # a format-1 compaction's gap
                current, pos = current + span_of(mm, ks)[0], nxt
                continue
            head += delta_size
            if length < head or klen > length - head:
                raise CorruptLogError(path, pos, "record length does not verify")
            current += span_of(mm, ks)[0]
            ks += delta_size
        if current >= mark_end:
            i, mark_start, mark_end = marks.range_from(current, i)
        marked = current >= mark_start or attrs & dead > 0
        key = None if klen < 0 else bytes(view[ks:ks + klen])
        cause = decide(current, key, length - head == (klen if klen > 0 else 0), marked)
        if cause is None:
            writer.read = read0 + nxt
            if nxt - ks >= combine_min:
                _keep_long(view, pos, ks, nxt, crc, attrs, ts, klen, current, writer, path)
            elif crc32(view[pos + frame:nxt]) != crc:
                raise CorruptLogError(path, pos, "record checksum does not verify")
            elif current == writer.next and not attrs & special:   # verbatim
                writer.record(current, view[pos:nxt], ts)
            else:
                moved = reframed(attrs, ts, klen, view[ks:nxt], current - writer.next)
                writer.record(current, moved, ts)
            writer.kept_marked |= marked
            kept += 1
        elif cause is dropping:
            run += 1
        else:
            dropped[dropping] += run     # a dropping of None (no drop yet) is popped below
            dropping, run = cause, 1
        if not current & 0x3FF:  # a run of dropped records counts as read too
            writer.progress(read0 + nxt)
        current, pos = current + 1, nxt
    dropped[dropping] += run
    dropped.pop(None, None)
    return pos, kept


def _keep_long(view: memoryview, pos: int, ks: int, nxt: int, crc: int, attrs: int, ts: int,
               klen: int, offset: int, writer: OutputWriter, path: str) -> None:
    """_copy_kept's path for a record of COMBINE_MIN bytes or more after its body head (which
    ends at `ks`): verified against its CRC by way of its head's, so that, framed anew, its new
    CRC is derived from them instead of computed over its bytes again."""
    crc32 = rec.crc32
    head_crc = crc32(view[pos + rec.FRAME_SIZE:ks])
    if crc32(view[ks:nxt], head_crc) != crc:
        raise CorruptLogError(path, pos, "record checksum does not verify")
    if offset == writer.next and not attrs & rec.ATTR_DELTA:
        writer.record(offset, view[pos:nxt], ts)
    else:
        writer.record(offset, rec.reframed(attrs, ts, klen, view[ks:nxt], offset - writer.next,
                                           crc, head_crc), ts)
