"""Recovery at open.

The writer makes the last segment writable again: a sealed index is trusted as is; otherwise the
tail is scanned from the last index checkpoint that still verifies (commitlog.segments.sealed);
damage found on the way (records that verify after bytes that do not) is mended, every record that
verifies kept (commitlog.append.mending), and a torn write after the last good record is zeroed and
logged with its byte count.
A zero-length last segment (a crash while creating it) is removed. A last segment shorter than
segment_size was sealed short by a time-based roll (the listing checked it is complete): its index is
written back if a crash lost it; a full-size one whose sealed index says it was being cut (a crash
between the seal and the cut, or a reader holding it then, see ActiveSegment.seal_short) is cut
once nobody holds it. Used by the writer at open only.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os

from .. import record as rec
from ..segments.active import ActiveSegment, cut_short
from ..errors import CorruptLogError
from ..segments.index import IndexWriter, read_checkpoints, read_sealed, write_sealed
from ..layout import fsync_directory, index_path
from ..safeopen import open_file
from ..segments.sealed import SegmentScan, scan_segment
from .mending import mend, written_end
from ..segments.segment_list import SegmentList

log = logging.getLogger("commitlog")


def recover(segs: SegmentList, found: list[dict] | None = None) -> ActiveSegment | None:
    """The last segment, writable again, or None when there is none or it is sealed (the
    next append rolls). Drops a zero-length last segment from `segs`. Damage mended (see
    commitlog.append.mending) is added to `found` as damage-record entries."""
    found = [] if found is None else found
    if not segs.bases:
        return None
    base = segs.bases[-1]
    path = segs.segment_path(base)
    size = segs.segment_size
    st = os.stat(path)
    if st.st_size == 0:
        _drop_empty(segs, base, path)
        return None
    if st.st_size != size:
        _finish_short_seal(segs, base, st.st_size)
        return None  # sealed short: the next append rolls to a new segment
    sealed = read_sealed(index_path(path))
    if sealed is not None:
        _finish_cut(segs, base, path, sealed, st.st_ino)
        return None  # sealed: the next append rolls to a new segment
    rels, positions = read_checkpoints(index_path(path))
    fd = open_file(path, os.O_RDWR)
    try:
        mm = mmap.mmap(fd, size)
        try:
            tail = _scan_mending(mm, size, rels, positions, base, path, found)
            pos = tail.position
            if tail.status != rec.END:
                torn = written_end(mm, pos, size)
                if torn > pos:
                    mm[pos:torn] = bytes(torn - pos)
                    start = pos - pos % mmap.PAGESIZE  # only these pages: the rest of the
                    mm.flush(start, torn - start)       # segment may be 64 MiB of dirty zeros
                    log.warning("truncated %d bytes of torn or corrupt tail in %s at byte %d",
                                torn - pos, path, pos)
        finally:
            mm.close()
        index = IndexWriter(index_path(path), size, tail.rels, tail.positions)
        mtime_ns = os.stat(path).st_mtime_ns
        fd2 = open_file(path, os.O_RDWR)
        count = tail.count
        active = ActiveSegment(base, path, size, fd2, index, pos, count,
                               tail.first_ts if count else None, tail.last_ts if count else None,
                               mtime_ns)
    finally:
        os.close(fd)
    if tail.status == rec.END:
        # Crashed after writing the end marker but before sealing the index: finish the seal.
        segs.sealed(base, active.seal(durable=True))
        return None
    return active


def _drop_empty(segs: SegmentList, base: int, path: str) -> None:
    """Remove the zero-length last segment `base` (at `path`) a crash left while creating it."""
    log.warning("removing zero-length segment %s left by a crash while creating it", path)
    os.unlink(path)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(index_path(path))
    fsync_directory(segs.path)
    segs.forget(base)


def _finish_cut(segs: SegmentList, base: int, path: str, sealed, ino: int) -> None:
    """Cut the last segment a time-based roll sealed short (its index `sealed` names this very
    file, inode `ino`) when a crash or a reader holding it came before the cut."""
    if (sealed.compacted and sealed.used_bytes + rec.LENGTH_SIZE < segs.segment_size
            and segs.summaries.read_index(base, ino) is not None):
        if cut_short(path, sealed):
            log.warning("cut %s to %d bytes: its time-based roll sealed it, and a crash or a "
                        "reader holding it came before the cut", path,
                        sealed.used_bytes + rec.LENGTH_SIZE)


def _finish_short_seal(segs: SegmentList, base: int, found: int) -> None:
    """A short last segment whose index a crash lost (the data alone proved it complete at the
    listing): its sealed index written back."""
    if segs.summaries.read_index(base) is not None:
        return
    summary = segs.compacted_summary(base, found)
    if summary is None:  # the listing proved it complete: only a race could get here
        raise CorruptLogError(segs.segment_path(base), None, f"last segment is {found} bytes, expected "
                              f"{segs.segment_size} (and it is not a complete sealed segment)")
    write_sealed(index_path(segs.segment_path(base)), summary)
    log.warning("wrote back the index of %s, sealed short by a time-based roll", segs.segment_path(base))


def _scan_mending(mm, size: int, rels: list[int], positions: list[int], base: int, path: str,
                  found: list[dict]) -> SegmentScan:
    """The scan of the last segment, going on past every damage `mend` mends (its entries added
    to `found`, the records it touched flushed); it stops at a torn write, a clean end, or
    records that cannot be given offsets (saved aside by `mend`, cut by the caller)."""
    tail = scan_segment(mm, size, rels, positions)
    while tail.status != rec.END:
        mended = mend(mm, size, tail.position, base + tail.count, tail.last_ts, path)
        if mended is None:
            break
        found.append(mended.entry)
        start = tail.position - tail.position % mmap.PAGESIZE
        mm.flush(start, min(size, tail.position + rec.HEADER_SIZE) - start)
        if not mended.resume or rec.decode_at(mm, tail.position, size).status != rec.OK:
            break
        # Resumed from the mended record, a checkpoint that verifies now.
        tail = scan_segment(mm, size, tail.rels + [tail.count], tail.positions + [tail.position])
    return tail
