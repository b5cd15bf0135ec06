"""The swap of a compaction's output, crash-safe: the one place its protocol is implemented.

A run of consecutive sealed segments `b1 < ... < bk` (never the last one) becomes one file `b1`
covering exactly [b1, end(bk)): write `<b1>.log.cleaned` and `<b1>.index.cleaned`, fsync; under
the removal lock check the inputs unchanged, rename the index, then the data over `<b1>.log` (the
commit point); rename the other inputs to `.deleted`, unlink, fsync the directory. An output with
nothing live is no file: its range goes into `compacted` (commitlog.gaps) first, then the inputs.
After a SIGKILL at any instant every offset is served by the old segments or the new one, never
both and never neither; `finish_swaps` removes the leftovers at open. Each step's crash state, and
how a compacted file is recognised: docs, Concepts, "A compaction's swap".

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
