"""Head removal, crash-safe and from any process: the start offset advances first (in place in
`start.offset`, commitlog.startoffset, so a disk with no free block can still be cleaned), then
the segment and its index are renamed to `.deleted`, unlinked, and the directory fsynced. A crash
anywhere leaves either a segment below the start offset or a `.deleted` leftover, both finished
by `finish_removals` (the writer at open, a cleaner at its next pass).

A log from before `start.offset`, on a disk with no room even to create that file, cannot record
the advance first: its head is unlinked first and the advance recorded after, once the freed
space allows. That order is crash-safe too, since the start offset is never below the first
segment's base (a crash in between leaves a `.deleted` leftover or nothing to finish). Such a log
has no `start.offset`, and only there is a gap before the first segment taken for retention's.

A caller pacing its deletions by bytes asks `remove_head` to leave a large file renamed but not
unlinked (`RemovalResult.doomed`), then frees it in steps outside the lock (`shrink_doomed`,
`unlink_doomed`). Only a file no reader held is left so: it is out of the log's listing before the
first step, and a reader that opened it before the rename finds the name gone once it gets its
hold. A crash between steps leaves a shortened `.deleted` leftover, which `finish_removals` unlinks.

Removers of any process serialise on `<log>/.remove.lock`. Functions over a SegmentList.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass

from .. import gaps
from ..errors import StoreFullError, UnsafeLogFileError
from ..layout import DELETED_SUFFIX, fsync_directory, index_path, remove_lock_path
from ..locks import try_exclusive
from ..safeopen import open_file
from ..segments.segment_list import SegmentList

log = logging.getLogger("commitlog")


@dataclass(frozen=True)
class RemovalResult:
    """What `remove_head` did. `status`: removed, held, active (only the active segment is
    left), mismatch (the head is not `expected_base`). Immutable."""

    status: str
    base_offset: int | None = None
    path: str | None = None
    bytes: int = 0
    forced: bool = False
    new_start_offset: int | None = None
    doomed: str | None = None
    """The renamed segment file left for the caller to free (`shrink_doomed`, `unlink_doomed`)."""


def remove_head(segs: SegmentList, *, force: bool, expected_base: int | None,
                leave_over: int | None = None) -> RemovalResult:
    """`leave_over`: a segment file larger than this that no reader held is renamed but left for
    the caller (`RemovalResult.doomed`); None unlinks every file at once."""
    with removal_lock(segs.path):
        finish_removals(segs)
        live = segs.list().live(segs.state.start_offset())
        if not live:
            return RemovalResult("active", None)
        base = live[0].base_offset
        if expected_base is not None and base != expected_base:
            return RemovalResult("mismatch", base)
        path = segs.segment_path(base)
        fd = open_file(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            # Bases below the head's end are an interrupted swap's leftovers (commitlog.cleanup.swap),
            # superseded by the head: they go with it, and the start moves past them.
            short = segs.short_summary(base, size)
            end = short.end_offset(base) if short is not None and short.record_count else -1
            later = [s.base_offset for s in live[1:] if s.base_offset >= end]
            if later:
                new_start = later[0]
            else:
                # The last segment goes only once a time-based roll sealed it short (cut, or not
                # yet: its sealed index says so); the log is then empty and starts where it ended.
                sealed = short or segs.summaries.read_index(base, os.fstat(fd).st_ino)
                if sealed is None or not sealed.compacted or len(live) > 1:
                    return RemovalResult("active", base)
                new_start = sealed.end_offset(base)
            leftovers = [s.base_offset for s in live[1:] if s.base_offset < new_start]
            free = try_exclusive(fd)
            if not free and not force:
                return RemovalResult("held", base, path, size)
            doomed = None
            try:
                segs.state.advance_start_offset(new_start)
            except StoreFullError:
                unlink_segment(segs.path, path)  # see the module docstring
                with contextlib.suppress(StoreFullError):
                    segs.state.advance_start_offset(new_start)
            else:
                if free and leave_over is not None and size > leave_over:
                    doomed = doom_segment(segs.path, path)
                else:
                    unlink_segment(segs.path, path)
            for leftover in leftovers:  # below the start now: finish_removals' job after a crash
                unlink_segment(segs.path, segs.segment_path(leftover))
                segs.forget(leftover)
                log.info("removed %s, an interrupted compaction's leftover superseded by %s",
                         segs.segment_path(leftover), path)
        finally:
            os.close(fd)
        segs.forget(base)
        return RemovalResult("removed", base, path, size, forced=not free,
                             new_start_offset=new_start, doomed=doomed)


def unlink_segment(directory: str, path: str) -> None:
    """Rename a segment and its index to `.deleted`, unlink both, fsync the directory."""
    doomed = doom_segment(directory, path, sync=False)
    if doomed is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(doomed)
    fsync_directory(directory)


def doom_segment(directory: str, path: str, *, sync: bool = True) -> str | None:
    """Rename a segment to `.deleted` and unlink its index (renamed first, the same way); return
    the segment's new name, or None when it is gone already (or was unlinked in place on a full
    disk). `sync`: fsync the directory, so the renames outlive a crash."""
    doomed = None
    for p in (path, index_path(path)):
        try:
            os.rename(p, p + DELETED_SUFFIX)
        except FileNotFoundError:
            continue
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            # No directory block for the longer name (ext4, full disk): unlink in place, index
            # first: a crash between leaves a head without its index (rebuilt), or one finished.
            for q in (index_path(path), path):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(q)
            return doomed        # the segment's own rename, if it was the index's that failed
        if p == path:
            doomed = p + DELETED_SUFFIX
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p + DELETED_SUFFIX)
    if sync:
        fsync_directory(directory)
    return doomed


def shrink_doomed(doomed: str, step: int) -> Iterator[int]:
    """Truncate the `.deleted` file `doomed` from its end, `step` bytes at a time down to at most
    `step`, yielding each step's bytes once freed; nothing when it cannot be opened for writing
    (gone: another remover finished it; refused). `unlink_doomed` frees the rest."""
    try:
        fd = open_file(doomed, os.O_WRONLY)
    except FileNotFoundError:
        return
    except (OSError, UnsafeLogFileError) as exc:
        log.info("%s cannot be truncated in steps (%s); it is unlinked whole", doomed,
                 getattr(exc, "strerror", None) or exc)
        return
    try:
        size = os.fstat(fd).st_size
        while size > step:
            size -= step
            os.ftruncate(fd, size)
            yield step
    finally:
        os.close(fd)


def unlink_doomed(doomed: str) -> None:
    """Unlink a `.deleted` file (gone already: nothing to do) and fsync its directory."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(doomed)
    fsync_directory(os.path.dirname(doomed))


def finish_removals(segs: SegmentList, *, temporaries: bool = False) -> list[str]:
    """Finish deletions a crash interrupted (call with `removal_lock` held): `.deleted`
    leftovers, and segments below the start offset never renamed; with `temporaries` (the
    writer at open only: a rebuild in progress writes them) also `<base>.index.tmp` files."""
    done: list[str] = []
    if not segs.state.has_start_file():
        # A log from before it: a gap before its first segment that no compaction recorded was
        # its full-disk removal's (unlinked first), and the file starts past it (commitlog.gaps).
        bases = segs.list().bases
        start = segs.state.start_offset()
        segs.state.ensure_start_file(gaps.read(segs.path).covered_from(bases[0], start) if bases else 0)
    start = segs.state.start_offset()
    listing = segs.list()
    for p in listing.deleted:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)
            done.append(p)
    bases = listing.bases
    for i, base in enumerate(bases[:-1]):
        if bases[i + 1] <= start:
            path = segs.segment_path(base)
            unlink_segment(segs.path, path)
            done.append(path)
    if bases and bases[-1] < start:  # a sealed last segment whose removal the crash cut short
        sealed = segs.summaries.read_index(bases[-1])
        if sealed is not None and sealed.compacted and sealed.end_offset(bases[-1]) <= start:
            path = segs.segment_path(bases[-1])
            unlink_segment(segs.path, path)
            done.append(path)
    if temporaries:
        for p in listing.temporaries:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)
    if done:
        fsync_directory(segs.path)
        log.info("finished %d interrupted removal(s) in %s", len(done), segs.path)
    return done


@contextlib.contextmanager
def removal_lock(directory: str) -> Iterator[None]:
    """Serialises removers (an embedded cleaner and a sidecar) on the same log."""
    fd = open_file(remove_lock_path(directory), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def is_held(path: str) -> bool:
    """True when some reader (any process) holds the segment at `path`; False once it is gone."""
    try:
        fd = open_file(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        return not try_exclusive(fd)
    finally:
        os.close(fd)
