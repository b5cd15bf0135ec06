"""Compaction's mechanism: rewrite runs of consecutive sealed segments with only the records a
caller's rule keeps, and swap each output in crash-safely (the protocol: commitlog.cleanup.swap).

The store decides nothing about liveness: the caller passes `decide(offset, key, tombstone,
marked)`, returning None to keep a record or the cause it is dropped for (policies.liveness's
`LivenessRule.cause` has this shape; retention wires it). `marked` comes from one snapshot of the
marks (`MarksSnapshot`) taken before the caller builds its key index (`record_facts` reads the log
under the same snapshot), so a mark arriving in between cannot drop a key's only value. A record
written dead (record.ATTR_DEAD) is passed as marked.

Throttling and stopping belong to the caller: `on_bytes(n)` is called with the bytes read plus
written (about a megabyte at a time; the caller may sleep in it), `should_stop()` between outputs.

Functions over a SegmentList; the log serialises compactions of one process, and the removal lock
serialises the swap against head removers of every process.
"""

from __future__ import annotations

import errno
import os
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from .. import record as rec
from . import swap
from ..diskusage import disk_usage
from ..errors import CorruptLogError, InvalidArgumentError, StoreFullError
from ..segments.index import SegmentSummary, write_sealed
from ..layout import TMP_SUFFIX, cleaned_path, compact_lock_path, fsync_directory, index_path
from ..meta import upgrade_format
from .kept_copy import Decide, copy_kept
from .marks_shrink import shrink_marks
from .marks_snapshot import MarksSnapshot, snapshot
from .output import OutputWriter
from .removal import removal_lock
from ..segments.segment_list import SEALED, SegmentList

_MAX_SPAN = 1 << 32                   # index entries hold u32 relative offsets


@dataclass(frozen=True)
class RewrittenRun:
    """A run of segments `compact` rewrote into one (what a plan asked for is the policies'
    `PlannedOutput`). segment: its base offset, None when nothing was live (the inputs
    went, their offsets became a gap); bytes_before/bytes_after: the inputs' and the output's
    file sizes; dropped: records dropped by cause. Immutable."""

    segment: int | None
    inputs: tuple[int, ...]
    bytes_before: int
    bytes_after: int
    kept: int
    dropped: Mapping[str, int]




def _records(segs: SegmentList, base: int, start: int = 0) -> Iterator[tuple]:
    """(offset, position, DecodeResult, mapping) of the records of segment `base` (gaps
    passed), verified, from the index entry at or below offset `start`; holds the segment
    meanwhile."""
    with segs.hold_file(base) as (mm, ino):
        if mm is None:
            return
        limit, kind, floor = segs.view_limits(base, mm, ino)
        rel, pos = floor(max(0, start - base))
        decode, gap, current = rec.decode_at, rec.ATTR_GAP, base + rel
        while True:
            r = decode(mm, pos, limit)
            if r.status != rec.OK:
                if r.status == rec.BAD and kind == SEALED:
                    raise CorruptLogError(segs.segment_path(base), pos,
                                          "record checksum or length does not verify")
                return
            if r.attributes & gap:
                current += rec.gap_span(mm, r.value_start)
            else:
                current += r.delta
                yield current, pos, r, mm
                current += 1
            pos = r.next_position


def record_facts(segs: SegmentList, marks: MarksSnapshot, start: int | None = None,
                 end: int | None = None) -> Iterator[tuple[int, bytes | None, bool, bool]]:
    """(offset, key, tombstone, marked) of every record in [start, end), under `marks`: what a
    caller's key index is built from (marked records included, flagged). Each record's CRC is
    verified; a bad one is CorruptLogError in a sealed segment, the end of a live one."""
    segs.refresh()
    lo = segs.start() if start is None else start
    hi = (1 << 63) if end is None else end
    bases = list(segs.bases)
    for i, base in enumerate(bases):
        if i + 1 < len(bases) and bases[i + 1] <= lo:
            continue
        if base >= hi:
            return
        with segs.hold_file(base) as (mm, ino):
            if mm is None:
                continue
            limit, kind, _ = segs.view_limits(base, mm, ino)
            sealed = segs.segment_path(base) if kind == SEALED else None
            if (yield from _facts(mm, limit, base, lo, hi, marks, sealed)):
                return


def _facts(mm, limit: int, base: int, lo: int, hi: int, marks: MarksSnapshot,
           sealed: str | None) -> Iterator[tuple[int, bytes | None, bool, bool]]:
    """record_facts' walk of one segment (the checks of record.decode_at, inline); returns True
    once past `hi`. `sealed`: the segment's path when sealed, None when a bad record may be one
    in flight."""
    unpack, crc32, span_of = rec.HEADER.unpack_from, rec.crc32, rec.SPAN.unpack_from
    frame, min_body, key_at = rec.FRAME_SIZE, rec.BODY_HEAD_SIZE, rec.HEADER_SIZE
    gap, dead, delta_bit, special = rec.ATTR_GAP, rec.ATTR_DEAD, rec.ATTR_DELTA, rec.ATTR_RESERVED
    delta_size = rec.DELTA_SIZE
    i, mark_start, mark_end = marks.range_from(max(base, lo))
    pos, current, bound = 0, base, limit - key_at
    while pos <= bound:
        length, crc, attrs, ts, klen = unpack(mm, pos)
        nxt, ks, head = pos + frame + length, pos + key_at, min_body
        if length < min_body or nxt > limit or klen < -1 or klen > length - min_body \
                or crc32(mm[pos + frame:nxt]) != crc:
            break
        if attrs & special:
            if attrs & gap:
                if klen != -1 or length != min_body + delta_size or attrs & delta_bit:
                    break
                current, pos = current + span_of(mm, ks)[0], nxt
                continue
            head += delta_size
            if length < head or klen > length - head:
                break
            current += span_of(mm, ks)[0]
            ks += delta_size
        if current >= hi:
            return True
        if current >= lo:
            if current >= mark_end:
                i, mark_start, mark_end = marks.range_from(current, i)
            tombstone = length - head == (klen if klen > 0 else 0)
            yield (current, None if klen < 0 else mm[ks:ks + klen], tombstone,
                   current >= mark_start or attrs & dead > 0)
        current, pos = current + 1, nxt
    length = rec.LENGTH.unpack_from(mm, pos)[0] if pos + rec.LENGTH_SIZE <= limit else 0
    if sealed is not None and length not in (0, rec.END_MARKER):
        raise CorruptLogError(sealed, pos, "record checksum or length does not verify")
    return False


def measure(segs: SegmentList, runs: list[tuple[int, int]]) -> list[tuple[int, int, int, int]]:
    """For mark_dead: `runs` (sorted, disjoint offset ranges) cut at segment bounds, each piece
    holding records as (start, end, framed bytes of its records, how many). Each segment is read
    once, from the index entry below its first run."""
    segs.refresh()
    bases = list(segs.bases)
    out = []
    for i, base in enumerate(bases):
        nxt = bases[i + 1] if i + 1 < len(bases) else 1 << 63
        mine = [(max(a, base), min(b, nxt)) for a, b in runs if a < nxt and b > base]
        if not mine:
            continue
        j, total, n = 0, 0, 0
        for offset, pos, r, _ in _records(segs, base, mine[0][0]):
            while j < len(mine) and offset >= mine[j][1]:
                if n:
                    out.append((mine[j][0], mine[j][1], total, n))
                j, total, n = j + 1, 0, 0
            if j == len(mine):
                break
            if offset >= mine[j][0]:
                total += r.next_position - pos
                n += 1
        if j < len(mine) and n:
            out.append((mine[j][0], mine[j][1], total, n))
    return out


def compact(segs: SegmentList, runs: Sequence[Sequence[int]], decide: Decide,
            marks: MarksSnapshot | None = None, *, on_bytes: Callable[[int], None] | None = None,
            should_stop: Callable[[], bool] | None = None) -> list[RewrittenRun]:
    """Rewrite each run of consecutive sealed segments (base offsets) into one output; see the
    module docstring. Stops between outputs when `should_stop()` is true."""
    marks = snapshot(segs) if marks is None else marks
    legacy = os.path.exists(compact_lock_path(segs.path))   # an older store's compactions ran
    with swap.compaction_lock(segs.path):
        with removal_lock(segs.path):
            swap.finish_swaps(segs, cleaned=True)
            swap.adopt_gaps(segs, legacy=legacy)
        if runs:
            upgrade_format(segs.path)  # before the first offset delta is written
        out = []
        for run in runs:
            if should_stop is not None and should_stop():
                break
            segs.refresh()
            out.append(_compact_run(segs, list(run), decide, marks, on_bytes))
        shrink_marks(segs)  # what the outputs applied may now be forgotten
        return out


def _check_run(segs: SegmentList, run: list[int]) -> list[int]:
    bases = segs.bases
    if not run:
        raise InvalidArgumentError("a compaction run must name at least one segment")
    try:
        i = bases.index(run[0])
    except ValueError:
        raise InvalidArgumentError(f"segment {run[0]} is not a segment of {segs.path}") from None
    if bases[i:i + len(run)] != run:
        raise InvalidArgumentError(f"segments {run} are not consecutive segments of {segs.path}")
    if i + len(run) >= len(bases) or (segs.active is not None and segs.active.base_offset in run):
        raise InvalidArgumentError(f"segments {run} include the last (active) segment of "
                                   f"{segs.path}: compaction never touches it")
    return [os.stat(segs.segment_path(b)).st_ino for b in run]


def _compact_run(segs: SegmentList, run: list[int], decide: Decide, marks: MarksSnapshot,
                 on_bytes: Callable[[int], None] | None) -> RewrittenRun:
    inodes = _check_run(segs, run)
    summaries = [segs.summary(b) for b in run]
    first, end = run[0], summaries[-1].end_offset(run[-1])
    if end - first >= _MAX_SPAN:
        raise InvalidArgumentError(f"segments {run} span {end - first} offsets; one output holds "
                                   f"fewer than {_MAX_SPAN}")
    paths = [segs.segment_path(b) for b in run]
    sizes = [os.stat(p).st_size for p in paths]
    # The live bytes as the marks know them (what a planner reserves too) plus one segment; a
    # keyed rule keeps less, offset deltas add a few bytes: ENOSPC stays the backstop.
    marked = segs.marks
    need = sum(s.used_bytes - marked.dead_bytes(b, s.end_offset(b), s.marks_seq)
               for b, s in zip(run, summaries)) + segs.segment_size
    free = disk_usage(segs.path).free_bytes
    if free < need:
        raise StoreFullError(f"no room to compact segments {run} of {segs.path}: needs {need} "
                             f"bytes (their live bytes plus one segment), {free} free")
    data_path = cleaned_path(segs.segment_path(first))
    index_tmp = cleaned_path(index_path(segs.segment_path(first)))
    writer = OutputWriter(data_path, first, segs.segment_size, on_bytes)
    dropped: defaultdict[str, int] = defaultdict(int)
    kept = 0
    try:
        for base, summary in zip(run, summaries):
            kept_here = _rewrite(segs, base, summary, decide, marks, writer, dropped)
            if kept_here:
                # Each input that keeps a record says its own end, whatever follows: what a plan
                # counts per segment is what is written.
                writer.hold_last_offset(summary.end_offset(base))
            kept += kept_here
        if not kept:
            writer.discard()
            with removal_lock(segs.path):
                _check_unchanged(segs, run, inodes)
                swap.drop(segs, run, end)
            return RewrittenRun(None, tuple(run), sum(sizes), 0, 0, dict(dropped))
        mtime_ns = max(os.stat(p).st_mtime_ns for p in paths)
        summary = writer.finish(end, mtime_ns, marks.seq)
        write_sealed(index_tmp, summary, index_tmp + TMP_SUFFIX)
        fsync_directory(segs.path)
        with removal_lock(segs.path):
            _check_unchanged(segs, run, inodes)
            swap.commit(segs, first, run[1:], data_path, index_tmp)
    except BaseException as exc:
        writer.discard()
        for p in (index_tmp, index_tmp + TMP_SUFFIX):
            if os.path.exists(p):
                os.unlink(p)
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise StoreFullError(f"disk full while compacting segments {run} of {segs.path}; "
                                 f"nothing was swapped") from exc
        raise
    return RewrittenRun(first, tuple(run), sum(sizes), writer.size + rec.LENGTH_SIZE, kept,
                            dict(dropped))


def _rewrite(segs: SegmentList, base: int, summary: SegmentSummary, decide: Decide,
             marks: MarksSnapshot, writer: OutputWriter, dropped: dict[str, int]) -> int:
    """Copy the records of sealed segment `base` that `decide` keeps into `writer`; returns how
    many. A walk that does not end exactly at the sealed length is CorruptLogError."""
    path = segs.segment_path(base)
    with segs.hold_file(base) as (mm, ino):
        limit, kind, _ = segs.view_limits(base, mm, ino)
        if kind != SEALED:
            raise InvalidArgumentError(f"segment {base} of {segs.path} is not sealed: "
                                       f"compaction never touches the active segment")
        view = memoryview(mm)
        read0 = writer.read
        try:
            pos, kept = copy_kept(mm, view, limit, base, path, decide, marks, writer, dropped)
            if pos != summary.used_bytes:
                raise CorruptLogError(path, pos, f"records end at byte {pos}, the index says "
                                                 f"{summary.used_bytes}")
            writer.progress(read0 + pos)
        finally:
            view.release()
    return kept


def _check_unchanged(segs: SegmentList, run: list[int], inodes: list[int]) -> None:
    """Under the removal lock: the inputs are still there, the same files (a head removal or
    another compaction may have run meanwhile)."""
    for base, ino in zip(run, inodes):
        try:
            now = os.stat(segs.segment_path(base)).st_ino
        except FileNotFoundError:
            now = None
        if now != ino:
            raise InvalidArgumentError(f"segment {base} of {segs.path} was removed or replaced "
                                       f"while it was being compacted; nothing was swapped")
