"""Opening a log directory, and closing what the open took: the writer lock, the segment size
recorded in meta.json, the offsets database, the segment list, and for a writer the preallocator
and the append path.

An open finishes what a crash left: removals half done and index temporaries, a compaction's swap
interrupted (a read-only open passes over its leftovers instead: they are not its to remove), and
the last segment, scanned back to its last good record and made writable again
(commitlog.append.recovery). Every segment's size is checked on the way (SegmentList.list).

`LogParts` is owned by one CommitLog and closed once, by it; not shared between threads.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

from . import damage
from .append.guard import DiskGuard
from .append.recovery import recover
from .meta import load_meta, refuse_orphaned
from .append.writer import Writer
from .cleanup import removal, swap
from .access import on_readonly_filesystem, process_user, unreadable, unwritable
from .errors import LogNotReadableError, LogNotWritableError, NotALogError
from .layout import META_FILE, compact_lock_path, foreign_names, is_log_directory, state_path
from .locks import WriterLock
from .options import LogOptions
from .segments.prealloc import SegmentPreallocator
from .segments.segment_list import SegmentList
from .state import LogState


@dataclass
class LogParts:
    """What an open log holds; None where the open did not get that far, or a reader needs none."""

    segment_size: int = 0
    writer_lock: WriterLock | None = None
    state: LogState | None = None
    segs: SegmentList | None = None
    preallocator: SegmentPreallocator | None = None
    writer: Writer | None = None
    media_readonly: bool = False   # a snapshot or backup: every write names the read-only filesystem

    def close(self, *, flush: bool) -> None:
        """Let go of everything: the active segment flushed (`flush`) and closed, its mtime its
        last write's time, then the list, the prepared segment, the database and the lock."""
        segs = self.segs
        active = segs.retire_active() if segs is not None else None
        if active is not None:
            if flush:
                active.flush()
            active.close()
            ns = active.last_write_ns
            with contextlib.suppress(OSError):
                os.utime(active.path, ns=(ns, ns), follow_symlinks=False)
        if segs is not None:
            segs.close()
        if self.writer is not None:
            self.writer.finish_cuts()  # left whole meanwhile: the next open cuts it if it is last
        if self.preallocator is not None:
            self.preallocator.discard()
        if self.state is not None:
            self.state.close()
        if self.writer_lock is not None:
            self.writer_lock.release()


def open_directory(path: str, options: LogOptions, guard: DiskGuard, *, lock_note: str = "",
                   create: bool = False) -> LogParts:
    """Open the log at absolute `path` (creating it unless read-only, in a missing or empty
    directory, or with `create` in one holding other files); on failure, everything taken so far
    is let go before the error propagates. `lock_note`: why the writer lock is taken
    (commitlog.locks.ROLLING: only to roll an idle log, so nothing is prepared ahead)."""
    parts = LogParts()
    try:
        _open(path, options, guard, parts, lock_note, create)
    except PermissionError as exc:
        parts.close(flush=False)
        if isinstance(exc, LogNotReadableError) or not options.readonly:
            raise
        # A file of the log this process may not read (a segment of mode 0600, say).
        raise LogNotReadableError(path, f"permission denied: {process_user()} may not read "
                                        f"{exc.filename or 'one of its files'}") from exc
    except BaseException:
        parts.close(flush=False)
        raise
    return parts


def _skip_committed(path: str, parts: LogParts, found: list[dict]) -> None:
    """No offset a consumer group committed past is given out again: when the log ends before the
    highest commit (its tail lost to damage, or a power loss), the offsets between are skipped.
    Damage found by recovery and the skip go to the log's damage record (commitlog.damage)."""
    committed = parts.state.committed()
    top = max(committed.values(), default=0)
    skipped = parts.writer.skip_to(top)
    if skipped is not None:
        groups = sorted(g for g, o in committed.items() if o > skipped[0])
        found.append(damage.entry(parts.segs.segment_path(parts.segs.active.base_offset), None,
                                  0, damage.OFFSETS_SKIPPED, skipped,
                                  f"consumer groups {', '.join(groups)} committed up to offset "
                                  f"{top}, past the end {skipped[0]} the log was recovered to: "
                                  f"the offsets between are skipped, never given out again"))
    damage.record_damage(path, found)


def _open(path: str, options: LogOptions, guard: DiskGuard, parts: LogParts, lock_note: str,
          create: bool) -> None:
    readonly = options.readonly
    denied = unreadable(path)     # never taken for a log not created yet, nor for a corrupt one
    if denied is not None:
        raise LogNotReadableError(path, denied)
    if os.path.exists(path) and not os.path.isdir(path):
        raise NotALogError(path, "it is a file, not a directory")
    if not readonly and (why := unwritable(path)) is not None:
        raise LogNotWritableError(path, why)
    if readonly:
        if not is_log_directory(path):
            raise NotALogError(path, "no such directory" if not os.path.exists(path) else f"no {META_FILE}")
    else:
        refuse_orphaned(path)  # before anything is created in it
        if not create and not is_log_directory(path) and (foreign := foreign_names(path)):
            raise NotALogError(path, f"the directory holds {', '.join(foreign[:3])}"
                                     f"{', ...' if len(foreign) > 3 else ''} and no {META_FILE}; to make a "
                                     f"new log beside those files, open it with create=True")
        os.makedirs(path, exist_ok=True)
        parts.writer_lock = WriterLock(path, note=lock_note)
    parts.segment_size = segment_size = load_meta(path, options.segment_size, create=not readonly)
    parts.state = state = LogState(state_path(path))
    parts.media_readonly = readonly and on_readonly_filesystem(path)
    parts.segs = segs = SegmentList(path, segment_size, state, readonly)
    if not readonly:
        with removal.removal_lock(path):
            removal.finish_removals(segs, temporaries=True)  # and a crashed index rebuild's temporaries
        parts.preallocator = SegmentPreallocator(path, segment_size, guard.may_reserve)
        parts.preallocator.discard_leftover()  # a crash's leftover is not trusted
        parts.writer = Writer(path, segment_size, segs, state, guard, parts.preallocator,
                              durable=options.flush != "none", sync=options.flush == "sync",
                              roll_after=options.roll_after)
        guard.on_refuse = parts.writer.release_prepared   # a prepared segment's room is given back
    segs.load(validate=True)
    if readonly:
        # Not ours to remove (the writer's next open or compaction does): passed over.
        leftovers = set(swap.superseded(segs, segs.bases))
        if leftovers:
            segs.pass_over(leftovers)
        segs.activate(None)
        return
    with swap.compaction_lock(path, wait=False) as idle, removal.removal_lock(path):
        if swap.finish_swaps(segs, cleaned=idle):
            segs.load()
        if idle and os.path.exists(compact_lock_path(path)):
            swap.adopt_gaps(segs, legacy=True)  # a log an older store compacted (commitlog.gaps)
    found: list[dict] = []
    active = recover(segs, found)
    parts.writer.adopt(active)
    segs.activate(active)
    _skip_committed(path, parts, found)
    # Preparing the next segment starts at the first roll, not here: writers that open, append a
    # little and close (Spark tasks take turns so) would pay for it. A new log's first append
    # needs a segment at once, so that one starts now.
    if not segs.bases and not lock_note:
        parts.preallocator.request()
