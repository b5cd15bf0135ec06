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
An output with no live record at all is no file: the inputs are removed as in step 4 and their
offsets become a gap (per offset: the old record, or no record, never both).

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
import fcntl
import logging
import os
from collections.abc import Iterator

from ..layout import CLEANED_SUFFIX, compact_lock_path, fsync_directory, index_path
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


def commit(segs: SegmentList, first: int, rest: list[int], data: str | None, index: str | None) -> None:
    """Steps 2 to 4 for inputs `[first] + rest`; `data`/`index`: the `.cleaned` pair, or None
    for an output with nothing live."""
    target = segs.segment_path(first)
    if data is None:
        for base in [first] + rest:
            unlink_segment(segs.path, segs.segment_path(base))
            segs.forget(base)
        return
    os.rename(index, index_path(target))
    os.rename(data, target)  # the commit point
    fsync_directory(segs.path)
    segs.replaced(first)
    for base in rest:
        unlink_segment(segs.path, segs.segment_path(base))
        segs.forget(base)
