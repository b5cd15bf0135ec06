"""CommitLog: a directory of fixed-size, preallocated, memory-mapped segments; the facade over the
store's rooms (see docs/development.md, "Layout").

Thread-safe within a process: appends serialise on one lock, reads and scans run concurrently.
Process-safe: one writer process at a time (`<log>/.lock`), any number of readers, and head removal
(`remove_head`) from any process, including one that opened the log read-only (the sidecar).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime

from . import record as rec
from .cleanup import removal, rewrite
from .segments import seginfo
from .arguments import check_commit, check_record, timestamp_ms_of
from .errors import InvalidArgumentError, ReadOnlyLogError
from .append.guard import DiskGuard, Flusher
from .options import (DEFAULT_BLOCK_TIMEOUT, DEFAULT_FLUSH, DEFAULT_FLUSH_INTERVAL, DEFAULT_ON_FULL,
                      DEFAULT_REFUSE_WRITES_RATIO, DEFAULT_RESUME_RATIO, DEFAULT_SEGMENT_SIZE,
                      LogOptions)
from .append.writer import BAD_RECORD
from .record import Record
from .cleanup.deadrecords import DeadRecords
from .cleanup.removal import RemovalResult
from .cleanup.marks_snapshot import MarksSnapshot
from .cleanup.rewrite import RewrittenRun
from .segments.local_reads import LocalReads
from .segments.segment import SegmentInfo
from .opening import open_directory
from .archive.remote import ArchiveReader
from .archive.tiered import TieredReads, archive_reader, warn_if_empty
from .access import LogGate

__all__ = ["DEFAULT_SEGMENT_SIZE", "CommitLog", "RemovalResult"]

_time_ns = time.time_ns


class CommitLog:
    """A segmented, memory-mapped commit log; see the module docstring for the concurrency
    contract. Open it with `CommitLog.open(...)` and use it as a context manager. It holds its
    parts: the local reads (`LocalReads`), across both tiers when opened with an `archive`
    (`TieredReads`, commitlog.archive.tiered), and its dead records (`DeadRecords`)."""

    def __init__(self, *_: object, **__: object) -> None:
        raise TypeError("use CommitLog.open(path, ...)")

    @classmethod
    def open(cls, path: str | os.PathLike, segment_size: int | None = None, *,
             readonly: bool = False, flush: str = DEFAULT_FLUSH,
             flush_interval: float = DEFAULT_FLUSH_INTERVAL,
             refuse_writes_ratio: float | None = DEFAULT_REFUSE_WRITES_RATIO,
             resume_ratio: float = DEFAULT_RESUME_RATIO, on_full: str = DEFAULT_ON_FULL,
             block_timeout: float = DEFAULT_BLOCK_TIMEOUT, roll_after: float | None = None,
             archive=None, create: bool = False) -> "CommitLog":
        """Open (and, unless `readonly`, create) the log in directory `path`; the settings are
        documented, with their units and defaults, in commitlog.LogOptions.

        archive: the log's archive tier, a URL (`s3://bucket/prefix`, `file:///dir`) or an open
        tier (`commitlog.archive.open_tier`, for an endpoint or region): reads below the local
        start go there (see docs/archive.md).

        readonly: read, commit consumer offsets and remove head segments, but never append;
        several read-only opens may coexist with one writer in another process. NotALogError when
        `path` is a plain file, or (read-only) a directory that holds no log.

        create: a writer makes a new log in a missing or empty directory, in one holding other
        files (a mistyped path?) only with `create=True`: else NotALogError naming them."""
        options = LogOptions(segment_size, readonly, flush, flush_interval, refuse_writes_ratio,
                             resume_ratio, on_full, block_timeout, roll_after)
        if not isinstance(path, (str, os.PathLike)):
            raise InvalidArgumentError(f"path must be a str or os.PathLike, got {path!r}")
        self = object.__new__(cls)
        self.path = os.path.abspath(os.fspath(path))
        self._archive = None if archive is None else archive_reader(archive, self.path)
        self.options, self.readonly, self.flush_mode = options, options.readonly, options.flush
        self._sync = options.flush == "sync"
        self._lock = threading.Lock()
        self._guard = DiskGuard(self.path, options.refuse_writes_ratio, options.resume_ratio,
                                options.on_full, options.block_timeout)
        self._parts = parts = open_directory(self.path, options, self._guard, create=create)
        self.segment_size = parts.segment_size
        self._state, self._segs, self._writer = parts.state, parts.segs, parts.writer
        self._gate = LogGate(self.path, self.readonly, parts.media_readonly)
        self._local = LocalReads(parts.segs, self.readonly)
        self._reads = self._local if self._archive is None else TieredReads(self._archive, self._local)
        self._dead = DeadRecords(parts.segs, self._gate, self._local.end)
        self._writable = not self.readonly  # open and not read-only: checked first on every append
        self._flusher = None if self.readonly else Flusher.for_writer(
            self.path, options.flush, options.flush_interval, options.roll_after, self._flush_due)
        if self._archive is not None:
            warn_if_empty(self._archive)
        return self

    @property
    def start_offset(self) -> int:
        """The first offset still kept (on either tier, with an archive)."""
        self._gate.check_open()
        return self._reads.start()

    @property
    def retention_start_offset(self) -> int:
        """The first offset retention has not removed, at or below `start_offset`: offsets
        between the two held only dead records a compaction removed (scans pass them)."""
        self._gate.check_open()
        return self._reads.retained_start()

    @property
    def archive(self) -> ArchiveReader | None:
        """The reader of the log's archive tier, when opened with one."""
        return self._archive

    @property
    def end_offset(self) -> int:
        """The next offset to be written (for a read-only open: as far as written so far)."""
        self._gate.check_open()
        return self._local.end()

    def append(self, value, key: bytes | None = None, timestamp_ms: int | None = None,
               attributes: int = 0) -> int:
        """Append one record (value and key: bytes-like); return its offset."""
        lock = self._lock
        lock.acquire()  # cheaper than `with` on this hot path
        try:
            if not self._writable:
                self._check_writable()
            now_ns = _time_ns()
            guard = self._guard
            if guard.refusing or not guard.checked_ns <= now_ns < guard.due_ns:
                guard.check()
            seg = self._segs.active
            if seg is not None and now_ns >= seg.roll_due_ns:
                seg = self._writer.roll_by_time(seg, now_ns)
            try:
                offset = -1 if seg is None else seg.append(value, key, timestamp_ms, attributes, now_ns)
                if offset < 0:  # a roll: checked first, so a bad record cannot cause one
                    check_record(value, key, timestamp_ms, attributes)
                    seg = self._writer.roll(rec.HEADER_SIZE + len(value) + (0 if key is None else len(key)))
                    offset = seg.append(value, key, timestamp_ms, attributes, now_ns)
            except BAD_RECORD:
                check_record(value, key, timestamp_ms, attributes)  # names the bad argument
                raise
            if self._sync:
                seg.flush()
            return offset
        finally:
            lock.release()

    def append_batch(self, values: Iterable, *, keys: Sequence[bytes | None] | None = None,
                     timestamp_ms: int | None = None, attributes: int = 0) -> int:
        """Append many records with one timestamp; return the offset of the first. A value of the
        wrong type is reported before anything is written. If the disk fills at a roll in the
        middle, the records before it are kept (see `end_offset`)."""
        if values is None or isinstance(values, (bytes, bytearray, memoryview, str)):
            raise InvalidArgumentError(f"values must be an iterable of bytes-like records, got "
                                       f"{type(values).__name__}")
        values = values if isinstance(values, list) else list(values)
        with self._lock:
            if not self._writable:
                self._check_writable()
            return self._writer.append_many(values, None if keys is None else list(keys), timestamp_ms,
                                            attributes, _time_ns())

    def flush(self) -> None:
        """Write the active segment's dirty pages to disk now."""
        with self._lock:
            self._gate.check_open()
            if self._segs.active is not None:
                self._segs.active.flush()

    def _flush_due(self) -> bool:
        with self._lock:
            if self._gate.closed:
                return False
            self._writer.flush_due(self.flush_mode == "async", _time_ns())
            return True

    def read(self, offset: int) -> Record:
        """The record at `offset`. OffsetOutOfRangeError if removed by retention (naming the start)
        or not yet written; OffsetRemovedError (naming the next offset that exists) if dead or
        removed by a compaction, the whole head segments before the first one included."""
        self._gate.check_open()
        return self._reads.read(offset)

    def scan(self, start: int | None = None, end: int | None = None, *,
             zero_copy: bool = False) -> Iterator[Record]:
        """Yield records from `start` (default: the start offset) up to `end` (exclusive; default:
        as far as written), the segment being read held (a shared flock) until the scan moves on
        or is closed. zero_copy=True: memoryview values of the mapping, valid while referenced."""
        self._gate.check_open()
        return self._reads.scan(start, end, zero_copy)

    def offset_for_time(self, timestamp_ms: int | datetime) -> int | None:
        """The first offset whose record's timestamp is at or after `timestamp_ms` (ms since the
        epoch, or a timezone-aware datetime; a naive one is InvalidArgumentError), among the records
        kept and live; None when none is that late (yet). Exact while timestamps never decrease
        along the log (commitlog.segments.timelookup); O(log segments) index reads and a short scan."""
        self._gate.check_open()
        return self._reads.offset_for_time(timestamp_ms_of("timestamp_ms", timestamp_ms))

    def segments(self) -> list[SegmentInfo]:
        """Every segment, oldest first; the last is the active one."""
        self._gate.check_open()
        return seginfo.infos(self._segs)

    def segment_end_offset(self, base: int) -> int:
        """The offset after the last record of segment `base`; for the last segment, as far as
        written so far. Lets a caller that listed the directory itself skip another listing."""
        self._gate.check_open()
        return seginfo.end_offset(self._segs, base)

    def segment_info(self, base: int, *, last: bool = False) -> SegmentInfo:
        """Segment `base` as `segments()` describes it, for a caller that listed the directory
        itself (`last`: it is the listing's last segment). Validates the file: one of another size
        than segment_size must be a complete compacted segment (CorruptLogError otherwise). Its
        index is not kept in memory unless it was already. FileNotFoundError when it is gone."""
        self._gate.check_open()
        return seginfo.checked_info(self._segs, base, last=last)

    def foreign_files(self) -> list[str]:
        """Segment-named entries that are not regular files (symlinks, directories): never touched."""
        return list(self._segs.list().foreign)

    def remove_head(self, *, force: bool = False, expected_base: int | None = None,
                    leave_over: int | None = None) -> RemovalResult:
        """Remove the oldest segment, crash-safely, from any process (see commitlog.cleanup.removal).
        A segment a reader holds (a shared flock) is left alone and reported `held`, unless
        `force`. Never the last (active) segment. With `expected_base`, only that segment is
        removed (`mismatch` otherwise). `leave_over`: a file larger than this no reader held is
        left renamed for the caller to free in steps (`RemovalResult.doomed`)."""
        self._gate.check_change("remove a segment")
        return removal.remove_head(self._segs, force=force, expected_base=expected_base,
                                   leave_over=leave_over)

    def finish_removals(self) -> list[str]:
        """Finish deletions a crash interrupted: leftover `.deleted` files, and segments below the
        start offset that were never renamed. Returns the paths removed. Any process may call
        it; removers serialise on `<log>/.remove.lock`."""
        self._gate.check_open()
        if not self._gate.may_change():
            return []                  # nothing this process could finish there
        with removal.removal_lock(self.path):
            return removal.finish_removals(self._segs)

    def is_held(self, base: int) -> bool:
        """True when some reader (any process) holds segment `base`; False once it is gone."""
        return removal.is_held(self._segs.segment_path(base))

    def dead_bytes(self) -> int:
        """Bytes of the sealed segments' records marked dead and not yet dropped by a compaction
        (what compacting everything would give back, keyed liveness aside)."""
        return self._dead.dead_bytes()

    def segments_with_dead(self, select: Callable[[SegmentInfo], bool] | None = None) -> list[SegmentInfo]:
        """The sealed segments holding records marked dead and not yet dropped (those `select`
        picks, when given), each with its neighbours, and the last segment, oldest first: a
        compaction plan's input without a stat of every segment (seginfo.dead_neighbourhoods)."""
        return self._dead.segments_with_dead(select)

    def mark_dead(self, offsets: Iterable[int]) -> int:
        """Mark the records at `offsets` dead, durably (on disk when this returns), from any
        process, a read-only handle included: readers never return them again, and a compaction
        drops them (see commitlog.marks). Offsets already dead, removed, or in a gap are passed
        over. Returns how many records were newly marked. InvalidArgumentError for an offset not
        written yet or not an int >= 0 (nothing is marked then); StoreFullError when the disk
        has no room for the marks file to grow."""
        return self._dead.mark_dead(offsets)

    def marks_snapshot(self) -> MarksSnapshot:
        """The marks at this instant: build a key index (`record_facts`) and compact from it."""
        return self._dead.marks_snapshot()

    def record_facts(self, marks: MarksSnapshot, start: int | None = None,
                     end: int | None = None) -> Iterator[tuple[int, bytes | None, bool, bool]]:
        """(offset, key, tombstone, marked) of every record in [start, end) under `marks`, dead
        ones included: what a compaction's key index is built from."""
        return self._dead.record_facts(marks, start, end)

    def compact(self, runs: Sequence[Sequence[int]], decide: rewrite.Decide, *,
                marks: MarksSnapshot | None = None, on_bytes=None,
                should_stop=None) -> list[RewrittenRun]:
        """Rewrite each run of consecutive sealed segments (their base offsets) into one file of
        the records `decide(offset, key, tombstone, marked)` keeps (None: keep; else the cause it
        is dropped for), same offsets, swapped in crash-safely (commitlog.cleanup.swap), from any
        process (compactions serialise on a lock file). `on_bytes(n)`: bytes read plus written,
        about a megabyte at a time (sleep there to throttle); `should_stop()`: asked between
        outputs. StoreFullError (nothing changed) when the disk lacks room for an output plus one
        segment_size; InvalidArgumentError for a run that is not consecutive sealed segments (never
        the last, active one). With no run, it only finishes what a killed compaction left."""
        return self._dead.compact(runs, decide, marks, on_bytes, should_stop)

    def tombstones_first_seen(self) -> dict[int, float]:
        """Offset -> epoch seconds at which a compaction first kept the tombstone there."""
        return self._dead.tombstones_first_seen()

    def note_tombstones(self, seen: Mapping[int, float]) -> int:
        """Record when tombstones kept by a compaction were first seen (earliest time wins,
        durable on return, any process); returns how many were new."""
        return self._dead.note_tombstones(seen)

    def commit(self, group: str, offset: int) -> None:
        """Record that `group` consumed everything below `offset`."""
        self._gate.check_change("commit a consumer offset")
        check_commit(group, offset, self.end_offset, self.path)
        self._state.commit(group, offset)

    def committed(self) -> dict[str, int]:
        self._gate.check_open()
        return self._state.committed()

    def commit_times(self) -> dict[str, float]:
        """The last commit time (epoch seconds) of each group."""
        self._gate.check_open()
        return self._state.commit_times()

    def _check_writable(self) -> None:
        self._gate.check_open()
        if self.readonly:
            raise ReadOnlyLogError(f"log {self.path} was opened read-only")

    def close(self) -> None:
        if self._flusher is not None:
            self._flusher.stop()
        with self._lock:
            if self._gate.closed:
                return
            self._gate.closed = True
            self._writable = False
            self._parts.close(flush=self.flush_mode != "none")

    def __enter__(self) -> "CommitLog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"CommitLog({self.path!r}, segment_size={self.segment_size}, readonly={self.readonly})"
