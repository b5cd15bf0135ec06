"""Head removal, crash-safe and from any process: the start offset advances in `state.db` first,
then the segment and its index are renamed to `.deleted`, unlinked, and the directory fsynced.
A crash anywhere leaves either a segment below the start offset or a `.deleted` leftover, both
finished by `finish_removals` (the writer at open, a cleaner at its next pass).

Removers of any process serialise on `<log>/.remove.lock`. Functions over a SegmentList.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass

from .layout import DELETED_SUFFIX, fsync_directory, index_path, remove_lock_path
from .locks import try_exclusive
from .segments import SegmentList

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


def remove_head(segs: SegmentList, *, force: bool, expected_base: int | None) -> RemovalResult:
    with removal_lock(segs.path):
        finish_removals(segs)
        live = segs.list().live(segs.state.start_offset())
        if len(live) <= 1:
            return RemovalResult("active", live[0].base_offset if live else None)
        base, new_start = live[0].base_offset, live[1].base_offset
        if expected_base is not None and base != expected_base:
            return RemovalResult("mismatch", base)
        path = segs.segment_path(base)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            size = os.fstat(fd).st_size
            free = try_exclusive(fd)
            if not free and not force:
                return RemovalResult("held", base, path, size)
            segs.state.advance_start_offset(new_start)
            unlink_segment(segs.path, path)
        finally:
            os.close(fd)
        segs.forget(base)
        return RemovalResult("removed", base, path, size, forced=not free,
                             new_start_offset=new_start)


def unlink_segment(directory: str, path: str) -> None:
    """Rename a segment and its index to `.deleted`, unlink both, fsync the directory."""
    for p in (path, index_path(path)):
        doomed = p + DELETED_SUFFIX
        try:
            os.rename(p, doomed)
        except FileNotFoundError:
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(doomed)
    fsync_directory(directory)


def finish_removals(segs: SegmentList, *, temporaries: bool = False) -> list[str]:
    """Finish deletions a crash interrupted (call with `removal_lock` held): `.deleted`
    leftovers, and segments below the start offset never renamed; with `temporaries` (the
    writer at open only: a rebuild in progress writes them) also `<base>.index.tmp` files."""
    done: list[str] = []
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
    fd = os.open(remove_lock_path(directory), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def is_held(path: str) -> bool:
    """True when some reader (any process) holds the segment at `path`; False once it is gone."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        return not try_exclusive(fd)
    finally:
        os.close(fd)
