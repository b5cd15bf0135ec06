"""The swap of a compaction's output, crash-safe: the one place its protocol is written down.

A compaction rewrites a run of consecutive sealed segments `b1 < b2 < ... < bk` (never the last
segment, never one being prepared) into one file named `b1` that covers exactly [b1, end(bk)):
its live records, byte for byte (offsets, timestamps, keys, values, attributes, CRCs) but the
offset delta (record.ATTR_DELTA) a record after a removed run carries, and a gap record
(record.ATTR_GAP) when a removed run ends an input, so the data file alone says every record's
offset and its end. Steps:

1. write `<b1>.log.cleaned` and `<b1>.index.cleaned` (a sealed index flagged compacted, naming the
   data file's inode), fsync both, fsync the directory. A crash here: `.cleaned` files, removed
   at open (nothing else changed).
2. under `<log>/.remove.lock` (head removers wait), check the inputs are still there, unchanged;
   rename the index over `<b1>.index`. A crash here: the old `<b1>.log` with an index naming
   another inode, which readers ignore (they rebuild the summary from the data): the old state.
3. rename the data over `<b1>.log`: the commit point. From here on `<b1>.log` covers the whole run.
4. rename `<b2..bk>.log` and their indexes to `.deleted`, unlink them, fsync the directory. A crash
   here leaves inputs whose base lies below the end of the segment before them: leftovers,
   superseded by it, removed at open (`finish_swaps`) and passed by readers meanwhile.
An output with no live record at all is no file: its range [b1, end(bk)) is first recorded in
`<log>/compacted` (commitlog.gaps, durably), then the inputs are removed as in step 4 and their
offsets become a gap (per offset: the old record, or no record, never both). A crash after the
record leaves a recorded range whose files still serve it; there is no gap without its record, so
a reader never takes a compaction's gap for a lost segment (CorruptLogError) or for retention.

So after a SIGKILL at any instant every offset is served by the old segments or by the new one,
never both (leftovers are told apart by offsets, not by timing) and never neither. A reader of
another process inside a replaced file keeps its descriptor and mapping (rename and unlink leave
the inode alive), and checks what it cached about a segment against the inode it holds.

A compacted file is `used_bytes + 4` bytes (its end marker), smaller than segment_size; at open it
is told apart from a torn or foreign file by its index (flag and inode), or without one by its
data verifying up to an end marker in its last four bytes (SegmentList.compacted_summary).

Compactions of every process serialise on `<log>/.compact.lock` (`compaction_lock`). Functions
over a SegmentList; call them with the removal lock held.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
from collections.abc import Iterator

from .. import gaps
from ..layout import CLEANED_SUFFIX, compact_lock_path, compacted_path, fsync_directory, index_path
from ..segments import gapcheck
from ..locks import try_exclusive
from ..safeopen import open_file
from .removal import unlink_segment
from ..segments.segment_list import SegmentList

log = logging.getLogger("commitlog")


@contextlib.contextmanager
def compaction_lock(directory: str, *, wait: bool = True) -> Iterator[bool]:
    """Hold `<log>/.compact.lock`; yields False (without waiting) when `wait` is False and
    another process compacts. Without waiting, a missing lock file is not created (no
    compaction ever ran: a full disk may have no room for a new directory entry)."""
    try:
        fd = open_file(compact_lock_path(directory), os.O_RDWR | (os.O_CREAT if wait else 0))
    except FileNotFoundError:
        yield True
        return
    try:
        if wait:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield True
        else:
            yield try_exclusive(fd)
    finally:
        os.close(fd)


def cleaned_leftovers(directory: str) -> list[str]:
    with os.scandir(directory) as it:
        return [e.path for e in it if e.name.endswith(CLEANED_SUFFIX)]


def superseded(segs: SegmentList, bases: list[int]) -> list[int]:
    """The bases lying below the end of a compacted segment before them: a swap's leftovers.
    Only compacted segments (smaller than segment_size) can cover a later base, so only the
    files of another size are read."""
    out: list[int] = []
    covered = -1
    for base in bases:
        if base < covered:
            out.append(base)
            continue
        path = segs.segment_path(base)
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            continue
        summary = segs.short_summary(base, size)
        if summary is not None:
            covered = summary.end_offset(base)
    return out


def finish_swaps(segs: SegmentList, *, cleaned: bool) -> list[str]:
    """Remove the leftovers of an interrupted swap (see the module docstring) and, with
    `cleaned` (the caller holds the compaction lock: no compaction is writing them), the
    `.cleaned` files of an interrupted compaction. Returns the paths removed."""
    done = []
    for p in cleaned_leftovers(segs.path) if cleaned else ():
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)
            done.append(p)
    for base in superseded(segs, list(segs.list().bases)):
        path = segs.segment_path(base)
        unlink_segment(segs.path, path)
        segs.forget(base)
        done.append(path)
    if done:
        fsync_directory(segs.path)
        log.info("finished %d interrupted compaction step(s) in %s", len(done), segs.path)
    return done


def drop(segs: SegmentList, run: list[int], end: int) -> None:
    """An output with nothing live: [run[0], end) recorded as a compaction's gap, then the inputs
    removed (see the module docstring)."""
    adopt_gaps(segs, legacy=True)  # still missing: the compaction's own adoption found no room
    gaps.record(segs.path, [(run[0], end)], segs.state.start_offset())
    for base in run:
        unlink_segment(segs.path, segs.segment_path(base))
        segs.forget(base)


def adopt_gaps(segs: SegmentList, *, legacy: bool) -> None:
    """Create `<log>/compacted` when missing (commitlog.gaps): with the gaps found between the
    segment files when an older store compacted the log (`legacy`); prune it when retention
    passed some of its ranges."""
    start = segs.state.start_offset()
    try:
        if os.path.lexists(compacted_path(segs.path)):
            known = gaps.read(segs.path)
            if known.ends and known.ends[0] <= start:
                gaps.write(segs.path, gaps.merged(known.pairs(), start))
            return
        found = gapcheck.found_gaps(segs) if legacy else []
        gaps.adopt(segs.path, found, start, legacy=legacy)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        log.warning("no room to write %s yet", compacted_path(segs.path))
        return
    if found:
        log.info("adopted %d gap(s) of %s as an older compaction's", len(found), segs.path)


def commit(segs: SegmentList, first: int, rest: list[int], data: str, index: str) -> None:
    """Steps 2 to 4 for inputs `[first] + rest`; `data`/`index`: the `.cleaned` pair."""
    target = segs.segment_path(first)
    os.rename(index, index_path(target))
    os.rename(data, target)  # the commit point
    fsync_directory(segs.path)
    segs.replaced(first)
    for base in rest:
        unlink_segment(segs.path, segs.segment_path(base))
        segs.forget(base)
