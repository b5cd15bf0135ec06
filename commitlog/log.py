"""CommitLog: a directory of fixed-size, preallocated, memory-mapped segments.

Thread-safe within a process: appends serialise on one lock, reads and scans run concurrently.
Process-safe: one writer process at a time (`<log>/.lock`), any number of readers, and head removal
(`remove_head`) from any process, including one that opened the log read-only (the sidecar).
"""

from __future__ import annotations

import bisect
import contextlib
import fcntl
import json
import logging
import mmap
import os
import sys
import threading
import time
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate, chain, repeat
from operator import add as _add

from . import record as rec
from .diskusage import disk_usage
from .errors import (CorruptLogError, InvalidCommitError, LogClosedError, OffsetOutOfRangeError,
                     ReadOnlyLogError, RecordTooLargeError, SegmentSizeMismatchError,
                     StoreFullError)
from .index import (INDEX_INTERVAL, IndexWriter, SegmentSummary, index_path, read_checkpoints,
                    read_sealed, write_sealed)
from .locks import SegmentHolds, WriterLock, try_exclusive
from .record import Record
from .segment import (DELETED_SUFFIX, ActiveSegment, SegmentInfo, SegmentPreallocator,
                      fsync_directory, parse_segment_name, segment_name)
from .state import LogState

log = logging.getLogger("commitlog")

_BODY_HEAD_PACK = rec.BODY_HEAD.pack
_HEADER_SIZE = rec.HEADER_SIZE
_HEADER_UNPACK_FROM = rec.HEADER.unpack_from
_time_ns = time.time_ns
_FRAME_PACK = rec.FRAME.pack
_crc32 = rec.crc32

DEFAULT_SEGMENT_SIZE = 64 * 2**20
MIN_SEGMENT_SIZE = 4096
MAX_SEGMENT_SIZE = 2**32 - 1          # positions in the index are u32
FLUSH_MODES = ("sync", "async", "none")
ON_FULL_MODES = ("raise", "block")
META_FILE = "meta.json"
STATE_FILE = "state.db"
FORMAT_VERSION = 1
_DISK_CHECK_EVERY = 0.1               # seconds of appending between two disk checks
_BATCH_CHUNK = 1 << 20                # bytes framed in memory before one copy into the mapping
_LARGE_RECORD = 1 << 16               # records at least this big are written without a join
_SCAN_CHUNK = 1 << 18                 # bytes a scan reads ahead into one list of records
_SEALED, _ACTIVE, _LIVE = 0, 1, 2     # how a reader sees a segment (see _view_limits)
# The uniform-batch path packs CRCs through array("I"); it needs 4-byte little-endian items.
_CRC_ARRAY = array("I").itemsize == 4 and sys.byteorder == "little"


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


@dataclass(frozen=True)
class _Listing:
    bases: tuple[int, ...]
    foreign: tuple[str, ...]
    deleted: tuple[str, ...] = ()       # `<base>.log.deleted` / `<base>.index.deleted` leftovers
    temporaries: tuple[str, ...] = ()   # `<base>.index.tmp` of an interrupted index rebuild


class CommitLog:
    """A segmented, memory-mapped commit log; see the module docstring for the concurrency
    contract. Open it with `CommitLog.open(...)` and use it as a context manager."""

    def __init__(self, *_: object, **__: object) -> None:
        raise TypeError("use CommitLog.open(path, ...)")

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, path: str | os.PathLike, segment_size: int | None = None, *,
             readonly: bool = False, flush: str = "async", flush_interval: float = 0.5,
             refuse_writes_ratio: float | None = 0.90, resume_ratio: float = 0.85,
             on_full: str = "raise", block_timeout: float = 30.0) -> "CommitLog":
        """Open (and, unless `readonly`, create) the log in directory `path`.

        segment_size: bytes per segment for a new log (default 64 MiB); for an existing log it must
        match or be None. flush: "sync" (each append reaches the disk before it returns), "async"
        (a background flush every `flush_interval` seconds) or "none" (the OS decides).
        refuse_writes_ratio / resume_ratio / on_full / block_timeout: the writer's disk guard
        (None disables it). readonly: read, commit consumer offsets and remove head segments, but
        never append; several read-only opens may coexist with one writer in another process.
        """
        _check_open_arguments(segment_size, flush, flush_interval, refuse_writes_ratio,
                              resume_ratio, on_full, block_timeout)
        self = object.__new__(cls)
        self._init(os.fspath(path), segment_size, readonly, flush, flush_interval,
                   refuse_writes_ratio, resume_ratio, on_full, block_timeout)
        return self

    def _init(self, path, segment_size, readonly, flush, flush_interval, refuse_ratio,
              resume_ratio, on_full, block_timeout) -> None:
        self.path = os.path.abspath(path)
        self.readonly = readonly
        self.flush_mode = flush
        self._sync = flush == "sync"
        self._durable = flush != "none"  # rolls msync and fsync only when flushing is asked for
        self._closed = False
        self._writable = False  # open and not read-only: checked first on every append
        self._writer_lock: WriterLock | None = None
        self._preallocator: SegmentPreallocator | None = None
        self._state: LogState | None = None
        self._active: ActiveSegment | None = None
        self._flusher: threading.Thread | None = None
        self._stop_flusher = threading.Event()
        self._lock = threading.Lock()
        # Guards the segment list only, so a cleaner thread can list and remove segments while
        # an append holds `_lock` (blocked by on_full="block" until that cleaner frees space).
        self._meta_lock = threading.Lock()
        self._holds = SegmentHolds()
        self._summaries: dict[int, SegmentSummary] = {}
        self._refuse_ratio = refuse_ratio
        self._resume_ratio = resume_ratio
        self._on_full = on_full
        self._block_timeout = block_timeout
        self._refusing = False
        self._disk_checked_ns = self._disk_check_due_ns = 0  # time_ns of the last, next check
        self._head_ts: int | None = None  # the cached body head of append (attributes 0, no key)
        self._head = b""
        self._head_crc = 0
        try:
            if readonly:
                if not os.path.isfile(os.path.join(self.path, META_FILE)):
                    raise FileNotFoundError(f"{self.path} is not a commit log (no {META_FILE})")
            else:
                os.makedirs(self.path, exist_ok=True)
                self._writer_lock = WriterLock(self.path)
            self.segment_size = self._load_meta(segment_size)
            self._state = LogState(os.path.join(self.path, STATE_FILE))
            if not readonly:
                with self._removal_lock():
                    # And the temporaries of a crash while rebuilding an index.
                    self._finish_removals(temporaries=True)
                self._preallocator = SegmentPreallocator(self.path, self.segment_size)
                self._preallocator.discard_leftover()  # a crash's leftover is not trusted
            self._bases = list(self._list(validate=True).bases)
            if not readonly:
                self._recover()
                # Preparing the next segment starts at the first roll, not here: writers that
                # open, append a little and close (Spark tasks take turns so) would pay for it.
                # A new log's first append needs a segment at once, so that one starts now.
                if not self._bases:
                    self._preallocator.request()
            self._end = self._compute_end()
            self._writable = not readonly
            if not readonly and flush == "async":
                self._flusher = threading.Thread(target=self._flush_loop, args=(flush_interval,),
                                                 name=f"commitlog-flush:{self.path}", daemon=True)
                self._flusher.start()
        except BaseException:
            self.close()
            raise

    def _load_meta(self, requested: int | None) -> int:
        meta_path = os.path.join(self.path, META_FILE)
        try:
            with open(meta_path) as f:
                meta = json.load(f)
            size = int(meta["segment_size"])
        except FileNotFoundError:
            if self.readonly:
                raise
            size = requested or DEFAULT_SEGMENT_SIZE
            tmp = meta_path + ".tmp"
            with open(tmp, "w") as f:
                json.dump({"format": FORMAT_VERSION, "segment_size": size}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, meta_path)
            fsync_directory(self.path)
            return size
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptLogError(meta_path, None, f"unreadable log metadata ({exc})") from exc
        if requested is not None and requested != size:
            raise SegmentSizeMismatchError(
                f"log {self.path} was created with segment_size={size}; "
                f"cannot reopen it with segment_size={requested}")
        return size

    # ------------------------------------------------------------------ listing
    def _list(self, *, validate: bool = False) -> _Listing:
        """One scan of the directory: segments, foreign entries, leftovers of removals and of
        index rebuilds; with `validate`, every segment's size is checked too."""
        bases: list[int] = []
        foreign: list[str] = []
        deleted: list[str] = []
        temporaries: list[str] = []
        sizes: dict[int, int] = {}
        with os.scandir(self.path) as it:
            for entry in it:
                name = entry.name
                base = parse_segment_name(name)
                if base is None:
                    if name.endswith(DELETED_SUFFIX):
                        stem = name[: -len(DELETED_SUFFIX)].replace(".index", ".log")
                        if parse_segment_name(stem) is not None and entry.is_file(follow_symlinks=False):
                            deleted.append(entry.path)
                    elif name.endswith(".index.tmp") and entry.is_file(follow_symlinks=False) and \
                            parse_segment_name(name[: -len(".index.tmp")] + ".log") is not None:
                        temporaries.append(entry.path)
                    continue
                if entry.is_symlink() or not entry.is_file(follow_symlinks=False):
                    foreign.append(entry.path)  # reported and left alone, never read or deleted
                    continue
                if validate:
                    try:
                        sizes[base] = entry.stat(follow_symlinks=False).st_size
                    except FileNotFoundError:
                        continue  # removed by another process since the listing
                bases.append(base)
        bases.sort()
        if validate:
            for i, base in enumerate(bases):
                size = sizes[base]
                if size == self.segment_size or (i == len(bases) - 1 and size == 0):
                    continue
                what = "zero-length" if size == 0 else f"{size} bytes"
                raise CorruptLogError(self._segment_path(base), None,
                                      f"segment is {what}, expected {self.segment_size}")
        return _Listing(tuple(bases), tuple(foreign), tuple(deleted), tuple(temporaries))

    def foreign_files(self) -> list[str]:
        """Segment-named entries that are not regular files (symlinks, directories): never touched."""
        return list(self._list().foreign)

    def _segment_path(self, base: int) -> str:
        return os.path.join(self.path, segment_name(base))

    def _refresh(self) -> None:
        bases = list(self._list().bases)
        with self._meta_lock:
            active = self._active
            if active is not None and active.base_offset not in bases:
                bases.append(active.base_offset)
                bases.sort()
            self._bases = bases

    # ------------------------------------------------------------------ recovery
    def _recover(self) -> None:
        """Make the last segment writable again: trust its sealed index, or scan its tail from
        the last checkpoint that still verifies and truncate whatever is torn after it."""
        if not self._bases:
            return
        base = self._bases[-1]
        path = self._segment_path(base)
        if os.stat(path).st_size == 0:
            log.warning("removing zero-length segment %s left by a crash while creating it", path)
            os.unlink(path)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(index_path(path))
            fsync_directory(self.path)
            self._bases.pop()
            return
        if read_sealed(index_path(path)) is not None:
            return  # sealed: the next append rolls to a new segment
        rels, positions = read_checkpoints(index_path(path))
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        index = None
        try:
            mm = mmap.mmap(fd, self.segment_size)
            try:
                while positions and rec.decode_at(mm, positions[-1], self.segment_size).status != rec.OK:
                    rels.pop()
                    positions.pop()
                count, pos = (rels[-1], positions[-1]) if positions else (0, 0)
                last_ts = None
                while True:
                    r = rec.decode_at(mm, pos, self.segment_size)
                    if r.status != rec.OK:
                        break
                    count += 1
                    last_ts = r.timestamp_ms
                    pos = r.next_position
                if r.status == rec.END:
                    status_end = True
                else:
                    status_end = False
                    torn = _torn_extent(mm, pos, self.segment_size, r.status == rec.BAD)
                    if torn > pos:
                        mm[pos:torn] = bytes(torn - pos)
                        start = pos - pos % mmap.PAGESIZE  # only these pages: the rest of the
                        mm.flush(start, torn - start)       # segment may be 64 MiB of dirty zeros
                        log.warning("truncated %d bytes of torn or corrupt tail in %s at byte %d",
                                    torn - pos, path, pos)
                first = rec.decode_at(mm, 0, self.segment_size)
                first_ts = first.timestamp_ms if first.status == rec.OK else None
                if last_ts is None and count > 0:
                    last_ts = _last_timestamp(mm, positions[-1] if positions else 0, self.segment_size)
            finally:
                mm.close()
            index = IndexWriter(index_path(path), self.segment_size, rels, positions)
            mtime_ns = os.stat(path).st_mtime_ns
            fd2 = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            self._active = ActiveSegment(base, path, self.segment_size, fd2, index, pos, count,
                                         first_ts, last_ts, mtime_ns)
        finally:
            os.close(fd)
        if status_end:
            # Crashed after writing the end marker but before sealing the index: finish the seal.
            self._summaries[base] = self._active.seal(durable=True)
            self._active = None

    def _compute_end(self) -> int:
        if self._active is not None:
            return self._active.end_offset
        if not self._bases:
            return self._state.start_offset()
        base = self._bases[-1]
        return base + self._live_summary(base).record_count

    # ------------------------------------------------------------------ properties
    @property
    def start_offset(self) -> int:
        """The first offset still kept."""
        self._check_open()
        state_start = self._state.start_offset()
        bases = self._bases
        return max(state_start, bases[0]) if bases else max(state_start, self._end)

    @property
    def end_offset(self) -> int:
        """The next offset to be written (for a read-only open: as far as written so far)."""
        self._check_open()
        if self.readonly:
            self._refresh()
            self._end = self._compute_end()
        return self._end

    # ------------------------------------------------------------------ appending
    def append(self, value, key: bytes | None = None, timestamp_ms: int | None = None,
               attributes: int = 0) -> int:
        """Append one record; return its offset."""
        lock = self._lock
        lock.acquire()  # cheaper than `with` on this hot path
        try:
            if not self._writable:
                self._check_writable()
            return self._append_one(value, key, timestamp_ms, attributes)
        finally:
            lock.release()

    def _append_one(self, value, key, timestamp_ms, attributes) -> int:
        """One record, with `_lock` held. The hot path of append: one clock read serves the
        timestamp, the disk-check timer and the segment's last write time; the body head and
        its CRC are reused while the millisecond does not change."""
        now_ns = _time_ns()
        if self._refusing or not self._disk_checked_ns <= now_ns < self._disk_check_due_ns:
            self._guard_disk()
        ts = now_ns // 1_000_000 if timestamp_ms is None else timestamp_ms
        if key is None:
            klen = -1
            total = _HEADER_SIZE + len(value)
        else:
            klen = len(key)
            total = _HEADER_SIZE + klen + len(value)
        seg = self._active
        if seg is None or seg.position + total > seg.size:
            seg = self._roll(total)
        pos = seg.position
        offset = self._end
        if total >= _LARGE_RECORD:
            seg.write_large(value, key, ts, attributes)
        else:
            if klen < 0 and attributes == 0:
                if ts != self._head_ts:
                    self._head = _BODY_HEAD_PACK(0, ts, -1)
                    self._head_crc = _crc32(self._head)
                    self._head_ts = ts
                seg.mm[pos:pos + total] = (_FRAME_PACK(total - 8, _crc32(value, self._head_crc))
                                           + self._head + value)
            else:
                head = _BODY_HEAD_PACK(attributes, ts, klen)
                if klen > 0:
                    crc = _crc32(value, _crc32(key, _crc32(head)))
                    seg.mm[pos:pos + total] = _FRAME_PACK(total - 8, crc) + head + key + value
                else:
                    crc = _crc32(value, _crc32(head))
                    seg.mm[pos:pos + total] = _FRAME_PACK(total - 8, crc) + head + value
            seg.position = pos + total
            seg.count += 1
            seg.last_ts = ts  # first_ts: ActiveSegment.summary reads it from record 0
        seg.last_write_ns = now_ns
        if pos >= seg.next_index_at:
            seg.index.add(offset - seg.base_offset, pos)
            seg.next_index_at = pos + INDEX_INTERVAL
        self._end = offset + 1
        if self._sync:
            seg.flush()
        return offset

    def append_batch(self, values: Iterable, *, keys: Sequence[bytes | None] | None = None,
                     timestamp_ms: int | None = None, attributes: int = 0) -> int:
        """Append many records with one timestamp; return the offset of the first.

        Records are framed in C-level passes (map/join) and copied into the mapping up to a
        megabyte at a time. If the disk fills at a roll in the middle, the records before it are
        kept (see `end_offset`)."""
        with self._lock:
            if not self._writable:
                self._check_writable()
            now_ns = _time_ns()
            ts = now_ns // 1_000_000 if timestamp_ms is None else timestamp_ms
            first = self._end
            if keys is not None:
                for value, key in zip(values, keys, strict=True):
                    self._append_one(value, key, ts, attributes)
                return first
            values = values if isinstance(values, list) else list(values)
            if not values:
                return first
            head = _BODY_HEAD_PACK(attributes, ts, -1)
            head_crc = _crc32(head)
            sizes = list(map(len, values))
            if _CRC_ARRAY and sizes.count(sizes[0]) == len(sizes):
                self._append_uniform(values, sizes[0], head, head_crc, ts, now_ns)
                return first
            # cum[k]: bytes before record k in this batch, so record k spans cum[k]..cum[k+1].
            cum = [0]
            cum += accumulate(map(_add, sizes, repeat(rec.HEADER_SIZE)))
            i, n = 0, len(values)
            while i < n:
                if self._refusing or not self._disk_checked_ns <= _time_ns() < self._disk_check_due_ns:
                    self._guard_disk()
                seg = self._active
                room = 0 if seg is None else seg.size - seg.position
                j = bisect.bisect_right(cum, cum[i] + min(room, _BATCH_CHUNK), lo=i) - 1
                if j <= i:
                    if seg is not None and room >= cum[i + 1] - cum[i]:
                        j = i + 1  # one record bigger than a chunk still fits
                    else:
                        self._roll(cum[i + 1] - cum[i])
                        continue
                chunk = values[i:j]
                frames = map(_FRAME_PACK, map(_add, sizes[i:j], repeat(rec.BODY_HEAD_SIZE)),
                             map(_crc32, chunk, repeat(head_crc)))
                data = b"".join(chain.from_iterable(zip(frames, repeat(head), chunk)))
                p0 = seg.position
                rel0 = seg.count
                seg.mm[p0:p0 + len(data)] = data
                # Sparse index: the first record starting at or after each INDEX_INTERVAL mark.
                while True:
                    k = bisect.bisect_left(cum, seg.next_index_at - p0 + cum[i], lo=i, hi=j)
                    if k >= j:
                        break
                    at = p0 + cum[k] - cum[i]
                    seg.index.add(rel0 + k - i, at)
                    seg.next_index_at = at + INDEX_INTERVAL
                seg.position = p0 + len(data)
                seg.count += j - i
                if seg.first_ts is None:
                    seg.first_ts = ts
                seg.last_ts = ts
                seg.last_write_ns = now_ns
                self._end = seg.base_offset + seg.count
                i = j
            if self._sync:
                self._active.flush()
            return first

    def _append_uniform(self, values: list, size: int, head: bytes, head_crc: int, ts: int,
                        now_ns: int) -> None:
        """append_batch for records of one value size (the common case): frames are periodic,
        so a chunk is one join with a constant frame as separator, and the per-record CRCs are
        packed by array and dropped in with four strided slice assignments (no per-record
        Python call besides crc32)."""
        rsize = rec.HEADER_SIZE + size
        sep = bytearray(_FRAME_PACK(rec.BODY_HEAD_SIZE + size, 0) + head)
        i, n = 0, len(values)
        while i < n:
            if self._refusing or not self._disk_checked_ns <= _time_ns() < self._disk_check_due_ns:
                self._guard_disk()
            seg = self._active
            room = 0 if seg is None else seg.size - seg.position
            k = min(room, _BATCH_CHUNK) // rsize
            if k == 0:
                if room < rsize:
                    self._roll(rsize)
                    continue
                k = 1  # one record bigger than a chunk still fits
            k = min(k, n - i)
            chunk = values[i:i + k]
            crcs = array("I", map(_crc32, chunk, repeat(head_crc))).tobytes()
            chunk.insert(0, b"")
            data = sep.join(chunk)  # frame, head, value, frame, head, value, ... (CRCs zero)
            for b in range(4):
                data[4 + b::rsize] = crcs[b::4]
            p0 = seg.position
            end = p0 + k * rsize
            seg.mm[p0:end] = data
            # Sparse index: the first record starting at or after each INDEX_INTERVAL mark.
            while seg.next_index_at < end:
                t = max(0, -((p0 - seg.next_index_at) // rsize))
                if t >= k:
                    break
                at = p0 + t * rsize
                seg.index.add(seg.count + t, at)
                seg.next_index_at = at + INDEX_INTERVAL
            seg.position = end
            seg.count += k
            if seg.first_ts is None:
                seg.first_ts = ts
            seg.last_ts = ts
            seg.last_write_ns = now_ns
            self._end = seg.base_offset + seg.count
            i += k
        if self._sync:
            self._active.flush()

    def _roll(self, need: int) -> ActiveSegment:
        if need > self.segment_size:
            raise RecordTooLargeError(
                f"a record of {need} bytes (with its {rec.HEADER_SIZE}-byte header) cannot fit in "
                f"a segment of {self.segment_size} bytes in {self.path}")
        if self._active is not None:
            old = self._active
            self._active = None
            self._summaries[old.base_offset] = old.seal(durable=self._durable, close_mapping=False)
            self._preallocator.retire(old.mm)
        self._guard_disk()
        prepared = self._preallocator.take()
        seg = ActiveSegment.create(self.path, self._end, self.segment_size, prepared,
                                   durable=self._durable)
        with self._meta_lock:
            self._active = seg
            if seg.base_offset not in self._bases:
                self._bases.append(seg.base_offset)
        self._preallocator.request()
        return seg

    def _guard_disk(self) -> None:
        """Refuse (or hold) writes above refuse_writes_ratio until the disk is below resume_ratio."""
        if self._refuse_ratio is None:
            return
        deadline = None
        while True:
            ratio = disk_usage(self.path).used_ratio
            now = _time_ns()
            self._disk_checked_ns = now
            self._disk_check_due_ns = now + int(_DISK_CHECK_EVERY * 1e9)
            if self._refusing and ratio < self._resume_ratio:
                self._refusing = False
                log.info("disk of %s at %.1f%%: writes resume", self.path, ratio * 100)
            elif not self._refusing and ratio > self._refuse_ratio:
                self._refusing = True
                log.warning("disk of %s at %.1f%% is above refuse_writes_ratio %.0f%%: writes refused",
                            self.path, ratio * 100, self._refuse_ratio * 100)
            if not self._refusing:
                return
            message = (f"disk of {self.path} is {ratio:.1%} used, above refuse_writes_ratio "
                       f"{self._refuse_ratio:.0%}; writes resume below {self._resume_ratio:.0%}")
            if self._on_full == "raise":
                raise StoreFullError(message, used_ratio=ratio)
            if deadline is None:
                deadline = time.monotonic() + self._block_timeout
            if time.monotonic() >= deadline:
                raise StoreFullError(message + f" (blocked {self._block_timeout:g}s)", used_ratio=ratio)
            time.sleep(0.05)

    # ------------------------------------------------------------------ flushing
    def flush(self) -> None:
        """Write the active segment's dirty pages to disk now."""
        with self._lock:
            self._check_open()
            if self._active is not None:
                self._active.flush()

    def _flush_loop(self, interval: float) -> None:
        while not self._stop_flusher.wait(interval):
            with self._lock:
                if self._closed:
                    return
                if self._active is not None and self._active.position > self._active.flushed_to:
                    self._active.flush()

    # ------------------------------------------------------------------ reading
    def _locate(self, offset: int) -> int:
        """The base offset of the segment holding `offset`; OffsetOutOfRangeError if none does."""
        start = self._state.start_offset()
        bases = self._bases
        if offset < start or not bases or offset < bases[0]:
            self._refresh()
            raise OffsetOutOfRangeError(offset, self.start_offset, self._end)
        i = bisect.bisect_right(bases, offset) - 1
        if i == len(bases) - 1 and self.readonly:
            self._refresh()
            bases = self._bases
            i = bisect.bisect_right(bases, offset) - 1
        return bases[i]

    @contextlib.contextmanager
    def _hold(self, base: int) -> Iterator:
        path = self._segment_path(base)
        try:
            _, mm = self._holds.acquire(path)
        except FileNotFoundError:
            self._refresh()
            raise OffsetOutOfRangeError(base, self.start_offset, self._end) from None
        try:
            if base < self._state.start_offset():
                # Logically removed already (the remover advanced the start offset first).
                raise OffsetOutOfRangeError(base, self.start_offset, self._end)
            yield mm
        finally:
            self._holds.release(path)

    def _view_limits(self, base: int, mm) -> tuple[int, int, object]:
        """(readable byte limit, view kind, floor function) of a segment held as `mm`.

        _ACTIVE: this process writes it, the limit is exact (a bad record below it is
        corruption). _LIVE: the last segment, written by another process: its limit is unknown,
        so a bad record may be one in flight. _SEALED: the limit is the sealed length."""
        active = self._active
        if active is not None and active.base_offset == base:
            return active.position, _ACTIVE, active.index.floor
        # A reader may meet a segment still zero-length (being created, or left by a crash).
        size = len(mm) if mm is not None else 0
        if base == (self._bases[-1] if self._bases else None):
            summary = read_sealed(index_path(self._segment_path(base)))
            if summary is None:
                rels, positions = read_checkpoints(index_path(self._segment_path(base)))
                return size, _LIVE, _make_floor(rels, positions)
        else:
            summary = self._summary(base)
        return min(summary.used_bytes, size), _SEALED, summary.floor

    def read(self, offset: int) -> Record:
        """The record at `offset`. OffsetOutOfRangeError if removed or not yet written."""
        self._check_open()
        if offset < 0:
            raise OffsetOutOfRangeError(offset, self.start_offset, self._end)
        base = self._locate(offset)
        path = self._segment_path(base)
        with self._hold(base) as mm:
            limit, kind, floor = self._view_limits(base, mm)
            rel, pos = floor(offset - base)
            current = base + rel
            while True:
                r = rec.decode_at(mm, pos, limit)
                if r.status != rec.OK:
                    if r.status == rec.BAD and kind != _LIVE:
                        raise CorruptLogError(path, pos, "record checksum or length does not verify")
                    raise OffsetOutOfRangeError(offset, self.start_offset, self.end_offset)
                if current == offset:
                    return _record(mm, current, r)
                current += 1
                pos = r.next_position

    def scan(self, start: int | None = None, end: int | None = None, *,
             zero_copy: bool = False) -> Iterator[Record]:
        """Yield records from `start` (default: the start offset) up to `end` (exclusive; default:
        as far as written). The segment being read is held (a shared flock) until the scan moves
        on or is closed. zero_copy=True yields memoryview values of the mapping (no copy); they
        stay valid as long as they are referenced."""
        self._check_open()
        offset = self.start_offset if start is None else start
        if offset < self.start_offset:
            raise OffsetOutOfRangeError(offset, self.start_offset, self._end)
        return _Scan(self._scan(offset, end, zero_copy))

    def _scan(self, offset: int, end: int | None, zero_copy: bool) -> Iterator[list[Record]]:
        stop = end if end is not None else 1 << 63
        while offset < stop:
            if self.readonly or offset >= self._end:
                self._refresh()
            if not self._bases or offset > self._last_possible_offset():
                return
            try:
                base = self._locate(offset)
            except OffsetOutOfRangeError:
                if offset >= self.start_offset:
                    return
                raise
            with self._hold(base) as mm:
                limit, kind, floor = self._view_limits(base, mm)
                rel, pos = floor(offset - base)
                current = base + rel
                while current < offset:  # from the index entry to the first wanted record
                    r = rec.decode_at(mm, pos, limit)
                    if r.status != rec.OK:
                        break
                    current += 1
                    pos = r.next_position
                if current == offset:
                    while True:
                        records, pos, current = _read_records(mm, pos, limit, current, stop,
                                                              zero_copy)
                        if not records:
                            break
                        yield records
                status = rec.decode_at(mm, pos, limit).status if current < stop else rec.OK
                if status == rec.EMPTY and kind != _LIVE and pos >= limit:
                    status = rec.END  # read up to its sealed length, or the writer's position
            if current >= stop:
                return
            if status == rec.OK:
                offset = current  # the writer added a record after our read stopped: go on reading
                continue
            path = self._segment_path(base)
            if status == rec.BAD:
                if kind == _LIVE:
                    return  # the writer's record in flight, or a torn tail recovery will cut
                raise CorruptLogError(path, pos, "record checksum or length does not verify")
            if status == rec.EMPTY:
                if kind == _LIVE:
                    return  # the end of what is written so far
                raise CorruptLogError(path, pos, "unwritten bytes where a record should be")
            # The end of this segment: go on in the next one, if there is one.
            if kind == _ACTIVE:
                active = self._active
                if active is not None and active.base_offset == base:
                    return  # the end of the log as of this step
                offset = current  # rolled meanwhile: read the rest of it as a sealed segment
                continue
            if self.readonly:
                self._refresh()
            nxt = next((b for b in self._bases if b > base), None)
            if nxt is None:
                return  # sealed and nothing after it yet (a crash or a full disk at the roll)
            if current != nxt:
                raise CorruptLogError(path, pos, f"segment ends at offset {current} but the next "
                                      f"segment starts at offset {nxt}")
            offset = current

    def _last_possible_offset(self) -> int:
        return self._end if not self.readonly else 1 << 63

    # ------------------------------------------------------------------ segments
    def _summary(self, base: int) -> SegmentSummary:
        """The sealed summary of a non-active segment, rebuilt from the data if its index is
        missing or damaged."""
        cached = self._summaries.get(base)
        if cached is not None:
            return cached
        path = self._segment_path(base)
        summary = read_sealed(index_path(path))
        if summary is None:
            summary = self._rebuild_summary(base)
        self._summaries[base] = summary
        return summary

    def _rebuild_summary(self, base: int) -> SegmentSummary:
        path = self._segment_path(base)
        with self._hold(base) as mm:
            size = len(mm) if mm is not None else 0
            pos = count = 0
            rels: list[int] = []
            positions: list[int] = []
            first_ts = last_ts = 0
            next_index = INDEX_INTERVAL
            while True:
                r = rec.decode_at(mm, pos, size)
                if r.status == rec.BAD:
                    raise CorruptLogError(path, pos, "record checksum or length does not verify")
                if r.status != rec.OK:
                    break
                if pos >= next_index:
                    rels.append(count)
                    positions.append(pos)
                    next_index = pos + INDEX_INTERVAL
                if count == 0:
                    first_ts = r.timestamp_ms
                last_ts = r.timestamp_ms
                count += 1
                pos = r.next_position
        st = os.stat(path)
        summary = SegmentSummary(pos, count, first_ts, last_ts, st.st_mtime_ns, tuple(rels),
                                 tuple(positions))
        log.warning("rebuilt the index of %s (%d records)", path, count)
        if not self.readonly:
            try:
                write_sealed(index_path(path), summary)
                os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
            except OSError as exc:  # a full disk, say: the summary in memory is still right
                log.warning("could not write the rebuilt index of %s: %s", path, exc)
        return summary

    def segments(self) -> list[SegmentInfo]:
        """Every segment, oldest first; the last is the active one."""
        self._check_open()
        self._refresh()
        with self._meta_lock:
            bases = list(self._bases)
            active = self._active
        start = self._state.start_offset()
        out = []
        for i, base in enumerate(bases):
            nxt = bases[i + 1] if i + 1 < len(bases) else None
            if nxt is not None and nxt <= start:
                continue  # logically removed, its files not yet gone
            path = self._segment_path(base)
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue
            last = nxt is None
            try:
                if active is not None and active.base_offset == base:
                    s = active.summary()
                elif last:
                    s = self._live_summary(base)
                else:
                    s = self._summary(base)
            except OffsetOutOfRangeError:
                continue  # removed by another process while we looked
            out.append(SegmentInfo(base, path, st.st_size, s.used_bytes,
                                   s.first_timestamp_ms if s.record_count else None,
                                   s.last_timestamp_ms if s.record_count else None,
                                   st.st_mtime, last, s.record_count))
        return out

    def segment_end_offset(self, base: int) -> int:
        """The offset after the last record of segment `base`; for the last segment, as far as
        written so far. Lets a caller that listed the directory itself skip another listing."""
        self._check_open()
        active = self._active
        if active is not None and active.base_offset == base:
            return active.end_offset
        return base + self._live_summary(base).record_count

    def _live_summary(self, base: int) -> SegmentSummary:
        """Summary of the last segment written by another process: sealed index, or a scan."""
        path = self._segment_path(base)
        summary = read_sealed(index_path(path))
        if summary is not None:
            return summary
        count = 0
        first_ts = last_ts = 0
        pos = 0
        with self._hold(base) as mm:
            size = len(mm) if mm is not None else 0
            rels, positions = read_checkpoints(index_path(path))
            while positions and rec.decode_at(mm, positions[-1], size).status != rec.OK:
                rels.pop()
                positions.pop()
            if positions:
                count, pos = rels[-1], positions[-1]
            first = rec.decode_at(mm, 0, size)
            if first.status == rec.OK:
                first_ts = first.timestamp_ms
            while True:
                r = rec.decode_at(mm, pos, size)
                if r.status != rec.OK:
                    break
                last_ts = r.timestamp_ms
                count += 1
                pos = r.next_position
        return SegmentSummary(pos, count, first_ts, last_ts, 0)

    # ------------------------------------------------------------------ head removal
    def remove_head(self, *, force: bool = False, expected_base: int | None = None) -> RemovalResult:
        """Remove the oldest segment, crash-safely, from any process.

        The start offset advances in the state first, then the file is renamed to `.deleted`,
        unlinked and the directory fsynced. A segment a reader holds (a shared flock) is left alone
        and reported `held`, unless `force`. Never the last (active) segment. With
        `expected_base`, only that segment is removed (`mismatch` otherwise)."""
        self._check_open()
        with self._removal_lock():
            self._finish_removals()
            bases = self._list().bases
            start = self._state.start_offset()
            live = [b for i, b in enumerate(bases) if i + 1 == len(bases) or bases[i + 1] > start]
            if len(live) <= 1:
                return RemovalResult("active", live[0] if live else None)
            base, new_start = live[0], live[1]
            if expected_base is not None and base != expected_base:
                return RemovalResult("mismatch", base)
            path = self._segment_path(base)
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                size = os.fstat(fd).st_size
                free = try_exclusive(fd)
                if not free and not force:
                    return RemovalResult("held", base, path, size)
                self._state.advance_start_offset(new_start)
                self._unlink_segment(path)
            finally:
                os.close(fd)
            with self._meta_lock:
                if base in self._bases:
                    self._bases.remove(base)
                self._summaries.pop(base, None)
            return RemovalResult("removed", base, path, size, forced=not free,
                                 new_start_offset=new_start)

    def _unlink_segment(self, path: str) -> None:
        for p in (path, index_path(path)):
            doomed = p + DELETED_SUFFIX
            try:
                os.rename(p, doomed)
            except FileNotFoundError:
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(doomed)
        fsync_directory(self.path)

    def finish_removals(self) -> list[str]:
        """Finish deletions a crash interrupted: leftover `.deleted` files, and segments below the
        start offset that were never renamed. Returns the paths removed. Any process may call
        it; removers serialise on `<log>/.remove.lock`."""
        self._check_open()
        with self._removal_lock():
            return self._finish_removals()

    def _finish_removals(self, *, temporaries: bool = False) -> list[str]:
        done: list[str] = []
        start = self._state.start_offset()
        listing = self._list()
        for p in listing.deleted:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)
                done.append(p)
        bases = listing.bases
        for i, base in enumerate(bases[:-1]):
            if bases[i + 1] <= start:
                path = self._segment_path(base)
                self._unlink_segment(path)
                done.append(path)
        if temporaries:  # only the writer, at open: a rebuild in progress writes these
            for p in listing.temporaries:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(p)
        if done:
            fsync_directory(self.path)
            log.info("finished %d interrupted removal(s) in %s", len(done), self.path)
        return done

    @contextlib.contextmanager
    def _removal_lock(self) -> Iterator[None]:
        # Serialises removers (an embedded cleaner and a sidecar) on the same log.
        fd = os.open(os.path.join(self.path, ".remove.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def is_held(self, base: int) -> bool:
        """True when some reader (any process) holds segment `base`; False once it is gone."""
        try:
            fd = os.open(self._segment_path(base), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            return not try_exclusive(fd)
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ consumer state
    def commit(self, group: str, offset: int) -> None:
        """Record that `group` consumed everything below `offset`."""
        self._check_open()
        if not isinstance(group, str) or not group:
            raise InvalidCommitError(f"consumer group name must be a non-empty string, got {group!r}")
        end = self.end_offset
        if offset < 0 or offset > end:
            raise InvalidCommitError(
                f"cannot commit offset {offset} for group {group!r} in {self.path}: "
                f"it must be between 0 and the end offset {end}")
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

    def _check_writable(self) -> None:
        self._check_open()
        if self.readonly:
            raise ReadOnlyLogError(f"log {self.path} was opened read-only")

    def close(self) -> None:
        self._stop_flusher.set()
        if self._flusher is not None and self._flusher is not threading.current_thread():
            self._flusher.join()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._writable = False
            if self._active is not None:
                if self.flush_mode != "none":
                    self._active.flush()
                self._active.close()
                ns = self._active.last_write_ns
                with contextlib.suppress(OSError):
                    os.utime(self._active.path, ns=(ns, ns))
                self._active = None
            self._holds.close_all()
            if self._preallocator is not None:
                self._preallocator.discard()
            if self._state is not None:
                self._state.close()
            if self._writer_lock is not None:
                self._writer_lock.release()

    def __enter__(self) -> "CommitLog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"CommitLog({self.path!r}, segment_size={self.segment_size}, readonly={self.readonly})"


def _read_records(mm, pos: int, limit: int, current: int, stop: int, zero_copy: bool):
    """Verified records from `pos` until `stop`, about _SCAN_CHUNK bytes, or the first position
    without one; returns (records, position, offset) where it stopped. The hot loop of scan."""
    unpack = _HEADER_UNPACK_FROM
    crc32 = _crc32
    new = tuple.__new__
    out: list[Record] = []
    add = out.append
    view = memoryview(mm) if zero_copy and mm is not None else mm  # view[a:b]: a copy or a view
    bound = min(limit - _HEADER_SIZE + 1, pos + _SCAN_CHUNK)  # a header fits, and the chunk
    while pos < bound and current < stop:
        length, crc, attrs, ts, klen = unpack(mm, pos)
        nxt = pos + 8 + length
        if length < 13 or nxt > limit or crc32(mm[pos + 8:nxt]) != crc or klen > length - 13:
            break
        ks = pos + 21
        if klen > 0:
            key = mm[ks:ks + klen]
            ks += klen
        else:
            if klen < -1:
                break
            key = None if klen else b""
        add(new(Record, (current, ts, key, view[ks:nxt], attrs)))
        current += 1
        pos = nxt
    return out, pos, current


class _Scan:
    """The iterator `scan` returns. A for-loop over it runs C-level (itertools.chain over lists
    of records read a chunk at a time), not one generator resumption per record; `close()`
    releases the held segment at once. One consumer at a time (not thread-safe)."""

    __slots__ = ("_chunks", "_records")

    def __init__(self, chunks: Iterator[list[Record]]) -> None:
        self._chunks = chunks
        self._records = chain.from_iterable(chunks)

    def __iter__(self) -> Iterator[Record]:
        return self._records

    def __next__(self) -> Record:
        return next(self._records)

    def close(self) -> None:
        self._chunks.close()


def _record(mm, offset: int, r: rec.DecodeResult) -> Record:
    key = None if r.key_start < 0 else bytes(mm[r.key_start:r.key_end])
    return Record(offset, r.timestamp_ms, key, bytes(mm[r.value_start:r.value_end]), r.attributes)


def _make_floor(rels: list[int], positions: list[int]):
    def floor(rel: int) -> tuple[int, int]:
        i = bisect.bisect_right(rels, rel) - 1
        return (rels[i], positions[i]) if i >= 0 else (0, 0)
    return floor


def _torn_extent(mm, pos: int, size: int, bad: bool) -> int:
    """End of the garbage after the last good record at `pos` (== pos when there is none)."""
    if not bad and not any(mm[pos:min(pos + 64, size)]):
        return pos  # the common case: a clean tail of zeros
    last = pos
    p = pos
    while p < size:
        q = min(p + len(_ZEROS), size)
        data = mm[p:q]
        # One comparison skips a zero megabyte (rstrip alone walks it byte by byte).
        if len(data) < len(_ZEROS) or data != _ZEROS:
            stripped = len(data.rstrip(b"\0"))
            if stripped:
                last = p + stripped
        p = q
    return last


_ZEROS = bytes(1 << 20)


def _last_timestamp(mm, pos: int, size: int) -> int | None:
    ts = None
    while True:
        r = rec.decode_at(mm, pos, size)
        if r.status != rec.OK:
            return ts
        ts = r.timestamp_ms
        pos = r.next_position


def _check_open_arguments(segment_size, flush, flush_interval, refuse_ratio, resume_ratio,
                          on_full, block_timeout) -> None:
    if segment_size is not None:
        if not isinstance(segment_size, int) or isinstance(segment_size, bool):
            raise ValueError(f"segment_size must be an int number of bytes, got {segment_size!r}")
        if not MIN_SEGMENT_SIZE <= segment_size <= MAX_SEGMENT_SIZE:
            raise ValueError(f"segment_size must be between {MIN_SEGMENT_SIZE} and "
                             f"{MAX_SEGMENT_SIZE} bytes, got {segment_size}")
    if flush not in FLUSH_MODES:
        raise ValueError(f"flush must be one of {', '.join(FLUSH_MODES)}, got {flush!r}")
    if not flush_interval > 0:
        raise ValueError(f"flush_interval must be positive seconds, got {flush_interval!r}")
    if on_full not in ON_FULL_MODES:
        raise ValueError(f"on_full must be one of {', '.join(ON_FULL_MODES)}, got {on_full!r}")
    if not block_timeout >= 0:
        raise ValueError(f"block_timeout must be zero or positive seconds, got {block_timeout!r}")
    if refuse_ratio is not None:
        if not 0 < refuse_ratio <= 1:
            raise ValueError(f"refuse_writes_ratio must be in (0, 1], got {refuse_ratio!r}")
        if not 0 < resume_ratio <= refuse_ratio:
            raise ValueError(f"resume_ratio must be in (0, refuse_writes_ratio={refuse_ratio}], "
                             f"got {resume_ratio!r}")
