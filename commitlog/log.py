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
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime

from .segments import reading
from . import record as rec
from .cleanup import removal
from .segments import gapcheck, seginfo, timelookup
from .arguments import (check_commit, check_offset, check_record, check_scan_range, check_timestamp,
                        timestamp_ms_of)
from .errors import (InvalidArgumentError, LogClosedError, LogNotWritableError, OffsetOutOfRangeError,
                     ReadOnlyLogError)
from .append.guard import DiskGuard, Flusher
from .options import (DEFAULT_BLOCK_TIMEOUT, DEFAULT_FLUSH, DEFAULT_FLUSH_INTERVAL, DEFAULT_ON_FULL,
                      DEFAULT_REFUSE_WRITES_RATIO, DEFAULT_RESUME_RATIO, DEFAULT_SEGMENT_SIZE,
                      LogOptions)
from .append.writer import BAD_RECORD
from .record import Record
from .cleanup.deadrecords import DeadRecords
from .cleanup.removal import RemovalResult
from .segments.segment import SegmentInfo
from .opening import LogParts, open_directory
from .archive.remote import ArchiveReader
from .archive.tiered import TieredReads, archive_reader, warn_if_empty
from .access import on_readonly_filesystem, unwritable

__all__ = ["DEFAULT_SEGMENT_SIZE", "CommitLog", "RemovalResult"]

_time_ns = time.time_ns


class CommitLog(TieredReads, DeadRecords):
    """A segmented, memory-mapped commit log; see the module docstring for the concurrency
    contract. Open it with `CommitLog.open(...)` and use it as a context manager. Marking records
    dead and compaction: the methods of `DeadRecords` (commitlog.cleanup.deadrecords). Opened with
    an `archive`, reads below the local start go to the archive tier (`TieredReads`,
    commitlog.archive.tiered)."""

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
        reader = None if archive is None else archive_reader(archive, os.path.abspath(os.fspath(path)))
        self = object.__new__(cls)
        self._archive = reader
        self._init(os.fspath(path), options, create)
        if reader is not None:
            warn_if_empty(reader)
        return self

    def _init(self, path: str, options: LogOptions, create: bool = False) -> None:
        self.path = os.path.abspath(path)
        self.options = options
        self.readonly = options.readonly
        self.flush_mode = options.flush
        self._sync = options.flush == "sync"
        self._closed = False
        self._writable = False  # open and not read-only: checked first on every append
        self._parts: LogParts | None = None
        self._flusher: Flusher | None = None
        self._lock = threading.Lock()
        self._guard = DiskGuard(self.path, options.refuse_writes_ratio, options.resume_ratio,
                                options.on_full, options.block_timeout, self._release_prepared)
        self._parts = parts = open_directory(self.path, options, self._guard, create=create)
        self.segment_size = parts.segment_size
        self._state, self._segs, self._writer = parts.state, parts.segs, parts.writer
        self._media_readonly = parts.media_readonly
        self._writable = not self.readonly
        if not self.readonly and (options.flush == "async" or options.roll_after is not None):
            # The same thread rolls an idle writer's segment by time (at most a second late).
            every = options.flush_interval if options.flush == "async" else 1.0
            if options.roll_after is not None:
                every = min(every, 1.0, options.roll_after)
            self._flusher = Flusher(f"commitlog-flush:{self.path}", every, self._flush_due)

    # ------------------------------------------------------------------ offsets
    @property
    def start_offset(self) -> int:
        """The first offset still kept (on either tier, with an archive)."""
        self._check_open()
        return self._segs.start() if self._archive is None else self._tiered_start()

    @property
    def retention_start_offset(self) -> int:
        """The first offset retention has not removed, at or below `start_offset`: offsets
        between the two held only dead records a compaction removed (scans pass them)."""
        self._check_open()
        return self.start_offset if self._archive is not None else gapcheck.retained_start(self._segs)

    @property
    def archive(self) -> ArchiveReader | None:
        """The reader of the log's archive tier, when opened with one."""
        return self._archive

    @property
    def end_offset(self) -> int:
        """The next offset to be written (for a read-only open: as far as written so far)."""
        self._check_open()
        segs = self._segs
        if self.readonly:
            segs.catch_up()
        return segs.end()

    # ------------------------------------------------------------------ appending
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
        """Append many records with one timestamp; return the offset of the first.

        Records are framed in C-level passes (map/join) and copied into the mapping up to a
        megabyte at a time. A value of the wrong type is reported before anything is written. If
        the disk fills at a roll in the middle, the records before it are kept (see
        `end_offset`)."""
        if values is None or isinstance(values, (bytes, bytearray, memoryview, str)):
            raise InvalidArgumentError(f"values must be an iterable of bytes-like records, got "
                                       f"{type(values).__name__}")
        values = values if isinstance(values, list) else list(values)
        with self._lock:
            if not self._writable:
                self._check_writable()
            segs = self._segs
            now_ns = _time_ns()
            ts = now_ns // 1_000_000 if timestamp_ms is None else timestamp_ms
            seg = segs.active
            if seg is not None and now_ns >= seg.roll_due_ns:
                self._writer.roll_by_time(seg, now_ns)
            first = segs.end()
            if keys is not None:
                keys = list(keys)
                if len(keys) != len(values):
                    raise InvalidArgumentError(f"keys has {len(keys)} items for {len(values)} values")
                for i, (value, key) in enumerate(zip(values, keys)):
                    check_record(value, key, ts, attributes, f" [{i}] of the batch")
                for value, key in zip(values, keys):
                    self._writer.append_locked(value, key, ts, attributes, now_ns)
                return first
            return self._writer.append_batch(values, ts, attributes, now_ns, first)

    def _release_prepared(self) -> None:
        if self._writer is not None:
            self._writer.release_prepared()

    # ------------------------------------------------------------------ flushing
    def flush(self) -> None:
        """Write the active segment's dirty pages to disk now."""
        with self._lock:
            self._check_open()
            if self._segs.active is not None:
                self._segs.active.flush()

    def _flush_due(self) -> bool:
        with self._lock:
            if self._closed:
                return False
            active = self._segs.active
            if active is not None and active.dirty() and self.flush_mode == "async":
                active.flush()
            if self._writer.roll_after_ns is not None:
                self._writer.roll_if_due(_time_ns())
            return True

    # ------------------------------------------------------------------ reading
    def read(self, offset: int) -> Record:
        """The record at `offset`. OffsetOutOfRangeError if removed by retention (naming the start)
        or not yet written; OffsetRemovedError (naming the next offset that exists) if dead or
        removed by a compaction, the whole head segments before the first one included."""
        self._check_open()
        if self._archive is not None:
            return self._tiered_read(offset)
        return self._local_read(offset)

    def _local_read(self, offset: int) -> Record:
        check_offset("offset", offset, self._segs)
        return reading.read(self._segs, offset)

    def scan(self, start: int | None = None, end: int | None = None, *,
             zero_copy: bool = False) -> Iterator[Record]:
        """Yield records from `start` (default: the start offset) up to `end` (exclusive; default:
        as far as written). The segment being read is held (a shared flock) until the scan moves
        on or is closed. zero_copy=True yields memoryview values of the mapping (no copy); they
        stay valid as long as they are referenced."""
        self._check_open()
        if self._archive is not None:
            return self._tiered_scan(start, end, zero_copy)
        return self._local_scan(start, end, zero_copy)

    def _local_scan(self, start: int | None, end: int | None, zero_copy: bool) -> reading.Scan:
        check_scan_range(start, end)
        segs = self._segs
        offset = segs.start() if start is None else start
        if offset < segs.start():
            if offset < gapcheck.retained_start(segs):
                raise segs.out_of_range(offset)  # removed by retention: names the start
            offset = segs.start()  # before the first segment, a compaction's gap: passed like any

        return reading.scan(segs, offset, end, zero_copy)

    def offset_for_time(self, timestamp_ms: int | datetime) -> int | None:
        """The first offset whose record's timestamp is at or after `timestamp_ms` (ms since the
        epoch, or a timezone-aware datetime; a naive one is InvalidArgumentError), among the records
        kept and live; None when none is that late (yet). Exact while timestamps never decrease
        along the log (commitlog.segments.timelookup); O(log segments) index reads and a short scan."""
        self._check_open()
        timestamp_ms = timestamp_ms_of("timestamp_ms", timestamp_ms)
        if self._archive is not None:
            return self._tiered_offset_for_time(timestamp_ms)
        return self._local_offset_for_time(timestamp_ms)

    def _local_offset_for_time(self, timestamp_ms: int) -> int | None:
        check_timestamp("timestamp_ms", timestamp_ms)
        return timelookup.offset_for_time(self._segs, timestamp_ms)

    # The local tier's side of TieredReads (commitlog.archive.tiered).
    def _local_start(self) -> int:
        return self._segs.start()

    def _local_end(self) -> int:
        return self.end_offset

    def _local_chunks(self, offset: int, end: int | None, zero_copy: bool):
        return self._local_scan(offset, end, zero_copy).chunks

    def _live(self, records: list[Record]) -> list[Record]:
        marks = self._segs.marks
        marks.refresh()
        if records and marks.starts and marks.any_in(records[0].offset, records[-1].offset + 1):
            return [r for r in records if not marks.is_marked(r.offset)]
        return records

    def _is_marked(self, offset: int) -> bool:
        return self._segs.marks.is_marked(offset)

    # ------------------------------------------------------------------ segments
    def segments(self) -> list[SegmentInfo]:
        """Every segment, oldest first; the last is the active one."""
        self._check_open()
        return seginfo.infos(self._segs)

    def segment_end_offset(self, base: int) -> int:
        """The offset after the last record of segment `base`; for the last segment, as far as
        written so far. Lets a caller that listed the directory itself skip another listing."""
        self._check_open()
        active = self._segs.active
        if active is not None and active.base_offset == base:
            return active.end_offset
        return self._segs.live_summary(base).end_offset(base)

    def segment_info(self, base: int, *, last: bool = False) -> SegmentInfo:
        """Segment `base` as `segments()` describes it (explicit end offset, live bytes), for a
        caller that listed the directory itself (`last`: it is the listing's last segment, whose
        end is as far as written). Validates the file: one of another size than segment_size
        must be a complete compacted segment (CorruptLogError otherwise). Its index is not kept
        in memory unless it was already. FileNotFoundError when it is gone."""
        self._check_open()
        segs = self._segs
        segs.marks.refresh()
        try:
            return seginfo.info(segs, base, last=last, validate=True, keep=False)
        except OffsetOutOfRangeError:  # removed between the lookup and the hold
            raise FileNotFoundError(segs.segment_path(base)) from None

    def foreign_files(self) -> list[str]:
        """Segment-named entries that are not regular files (symlinks, directories): never touched."""
        return list(self._segs.list().foreign)

    # ------------------------------------------------------------------ head removal
    def remove_head(self, *, force: bool = False, expected_base: int | None = None,
                    leave_over: int | None = None) -> RemovalResult:
        """Remove the oldest segment, crash-safely, from any process (see commitlog.cleanup.removal).
        A segment a reader holds (a shared flock) is left alone and reported `held`, unless
        `force`. Never the last (active) segment. With `expected_base`, only that segment is
        removed (`mismatch` otherwise). `leave_over`: a file larger than this no reader held is
        left renamed for the caller to free in steps (`RemovalResult.doomed`)."""
        self._check_open()
        self._check_media("remove a segment")
        return removal.remove_head(self._segs, force=force, expected_base=expected_base,
                                   leave_over=leave_over)

    def finish_removals(self) -> list[str]:
        """Finish deletions a crash interrupted: leftover `.deleted` files, and segments below the
        start offset that were never renamed. Returns the paths removed. Any process may call
        it; removers serialise on `<log>/.remove.lock`."""
        self._check_open()
        if self._media_is_readonly() or (self.readonly and unwritable(self.path) is not None):
            return []                  # nothing this process could finish there
        with removal.removal_lock(self.path):
            return removal.finish_removals(self._segs)

    def is_held(self, base: int) -> bool:
        """True when some reader (any process) holds segment `base`; False once it is gone."""
        return removal.is_held(self._segs.segment_path(base))

    # ------------------------------------------------------------------ consumer state
    def commit(self, group: str, offset: int) -> None:
        """Record that `group` consumed everything below `offset`."""
        self._check_open()
        self._check_media("commit a consumer offset")
        check_commit(group, offset, self.end_offset, self.path)
        self._state.commit(group, offset)

    def committed(self) -> dict[str, int]:
        self._check_open()
        return self._state.committed()

    def commit_times(self) -> dict[str, float]:
        """The last commit time (epoch seconds) of each group."""
        self._check_open()
        return self._state.commit_times()

    # ------------------------------------------------------------------ closing
    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.path} is closed")

    def _media_is_readonly(self) -> bool:
        if self._media_readonly:       # re-asked: a long-lived reader outlives a remount read-write
            self._media_readonly = on_readonly_filesystem(self.path)
        return self._media_readonly

    def _check_media(self, what: str) -> None:
        if self._media_is_readonly():
            raise LogNotWritableError(self.path, f"cannot {what}: it is on a read-only filesystem")
        if self.readonly and (why := unwritable(self.path)) is not None:   # a writer's open checked
            raise LogNotWritableError(self.path, f"cannot {what}: {why}")

    def _check_writable(self) -> None:
        self._check_open()
        if self.readonly:
            raise ReadOnlyLogError(f"log {self.path} was opened read-only")

    def close(self) -> None:
        if self._flusher is not None:
            self._flusher.stop()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._writable = False
            if self._parts is not None:
                self._parts.close(flush=self.flush_mode != "none")

    def __enter__(self) -> "CommitLog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"CommitLog({self.path!r}, segment_size={self.segment_size}, readonly={self.readonly})"
