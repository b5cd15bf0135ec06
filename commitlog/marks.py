"""Records marked dead (`CommitLog.mark_dead`): one file of offset ranges, `<log>/marks`, shared by
every process that opens the log.

    entry (24 bytes): start u64, end u64 (exclusive), dead bytes u32, CRC32 u32 of the 20 before

A segment's live bytes are its used bytes minus the dead bytes of the entries in its range (a
compacted segment counts only entries from the sequence number its index records on). A mark is
durable when `mark_dead` returns; sequence numbers only grow, across `rewrite` too, which replaces
the file with the entries still needed (marks.tmp, a MOVED entry, a rename). Readers keep the
merged range set in memory and refresh it with one pread. The file's steps, the rewrite protocol
and what a crash leaves: docs, Concepts, "The marks file" and "Crash safety".

`MarkSet` is thread-safe (a lock guards its cache); process-safe through an exclusive flock of the
file, which markers (and a rewrite) hold.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import fcntl
import os
import struct
import threading
import zlib
from collections.abc import Callable, Iterable

from .errors import StoreFullError
from .layout import TMP_SUFFIX, fsync_directory
from .safeopen import open_file, temporary

ENTRY = struct.Struct("<QQII")
ENTRY_SIZE = ENTRY.size
MARKS_STEP = 64 * 1024                # bytes reserved at a time (2,730 entries)
_READ = 64 * ENTRY_SIZE * 16
_ZERO_ENTRY = (0, 0, 0, 0)             # a slot not written yet, unpacked
# Entries that are not ranges (start all ones, end below it): a rewritten file's first entry
# (end: the sequence number it starts at), and the last entry of a file a rewrite replaced.
_SPECIAL = (1 << 64) - 1
_FIRST, _MOVED = 1, 2

# Sorted runs of offsets not marked yet -> (start, end, bytes, records): pieces inside one segment
# each, with the framed size and number of the records in them.
Measure = Callable[[list[tuple[int, int]]], list[tuple[int, int, int, int]]]


def to_ranges(offsets: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted, merged [start, end) runs of the offsets (a `range` with step 1 stays one run)."""
    if isinstance(offsets, range) and offsets.step == 1:
        return [(offsets.start, offsets.stop)] if offsets.stop > offsets.start else []
    runs: list[tuple[int, int]] = []
    for o in sorted(set(offsets)):
        if runs and runs[-1][1] == o:
            runs[-1] = (runs[-1][0], o + 1)
        else:
            runs.append((o, o + 1))
    return runs


class MarkSet:
    """The marks of one log, cached; see the module docstring."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = -1  # the file is created by the first mark: a log never marked has none
        self._open(create=False)
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self.count = 0                      # the next entry's sequence number
        self._slot = 0                      # the next entry's slot in the file
        self.starts: list[int] = []         # merged, disjoint marked ranges
        self.ends: list[int] = []
        self._entries: list[tuple[int, int, int, int]] = []  # (start, seq, bytes, end), by start
        self.moved = False                  # the file ends with MOVED: replaced, or being

    # ------------------------------------------------------------------ reading
    def refresh(self) -> None:
        """Read entries written since the last refresh (one pread when there are none)."""
        with self._lock:
            self._refresh_locked()

    def _open(self, *, create: bool) -> bool:
        if self._fd < 0:
            try:
                self._fd = open_file(self.path, os.O_RDWR | (os.O_CREAT if create else 0))
            except FileNotFoundError:
                return False
        return True

    def _refresh_locked(self) -> None:
        if self._fd < 0 and not self._open(create=False):
            return
        crc32 = zlib.crc32
        while True:
            entries = self._entries             # anew after a move: _follow_move resets the cache
            data = os.pread(self._fd, _READ, self._slot * ENTRY_SIZE)
            view = memoryview(data)[:len(data) - len(data) % ENTRY_SIZE]
            for n, (start, end, nbytes, crc) in enumerate(ENTRY.iter_unpack(view)):
                at = n * ENTRY_SIZE
                if crc32(view[at:at + ENTRY_SIZE - 4]) != crc or (start, end, nbytes, crc) == _ZERO_ENTRY:
                    return  # not written yet, being written, or torn by a crash: re-read next time
                if start == _SPECIAL and end < start:
                    if nbytes == _FIRST and self._slot == 0:
                        self.count = end
                        self._slot = 1
                        continue
                    if nbytes == _MOVED and self._follow_move():
                        break  # the replacement is open: read it from its start
                    self.moved = nbytes == _MOVED
                    return
                if end <= start:
                    return
                self._add(start, end)
                if entries and start < entries[-1][0]:
                    bisect.insort(entries, (start, self.count, nbytes, end))
                else:                   # in order (most are): the sequence number breaks a tie
                    entries.append((start, self.count, nbytes, end))
                self.count += 1
                self._slot += 1
            else:
                if len(data) < _READ:
                    return

    def _follow_move(self) -> bool:
        """At a MOVED entry: when `marks` is another file now, take it (the cache reset, to be
        read whole) and return True; False while the rename is pending."""
        try:
            renamed = os.stat(self.path).st_ino != os.fstat(self._fd).st_ino
        except FileNotFoundError:
            return False
        if renamed:
            os.close(self._fd)
            self._fd = -1
            self._reset()
            self._open(create=False)
        return renamed

    def _add(self, start: int, end: int) -> None:
        starts, ends = self.starts, self.ends
        if not ends or start > ends[-1]:             # past every range, not touching the last
            starts.append(start)
            ends.append(end)
            return
        i = bisect.bisect_left(ends, start)          # first range ending at or after start
        j = bisect.bisect_right(starts, end)         # ranges starting at or before end
        if i < j:
            start = min(start, starts[i])
            end = max(end, ends[j - 1])
        starts[i:j] = [start]
        ends[i:j] = [end]

    def is_marked(self, offset: int) -> bool:
        i = bisect.bisect_right(self.starts, offset) - 1
        return i >= 0 and offset < self.ends[i]

    def any_in(self, lo: int, hi: int) -> bool:
        """True when some offset in [lo, hi) is marked."""
        i = bisect.bisect_right(self.starts, hi - 1) - 1
        return i >= 0 and self.ends[i] > lo

    def unmarked(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """The runs of [lo, hi) not marked."""
        out = []
        i = max(0, bisect.bisect_right(self.starts, lo) - 1)
        cur = lo
        starts, ends = self.starts, self.ends
        while cur < hi and i < len(starts) and starts[i] < hi:
            if ends[i] > cur:
                if starts[i] > cur:
                    out.append((cur, starts[i]))
                cur = ends[i]
            i += 1
        if cur < hi:
            out.append((cur, hi))
        return out

    def snapshot(self) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
        """(sequence, starts, ends) at this instant: what a compaction decides from."""
        with self._lock:
            self._refresh_locked()
            return self.count, tuple(self.starts), tuple(self.ends)

    def dead_bytes(self, lo: int, hi: int, since: int = 0) -> int:
        """Dead bytes of the entries starting in [lo, hi) with sequence number >= `since`."""
        entries = self._entries
        i = bisect.bisect_left(entries, (lo, -1, -1, -1))
        total = 0
        while i < len(entries) and entries[i][0] < hi:
            if entries[i][1] >= since:
                total += entries[i][2]
            i += 1
        return total

    def latest_by_segment(self, bases: list[int], first: int = 0) -> dict[int, int]:
        """Index i -> the highest sequence number of the entries starting in [bases[i],
        bases[i + 1]) (the last base: up to any offset), for i >= `first`; sorted `bases`.
        One walk of the entries: what a caller compares with each segment's applied sequence
        number (its index's `marks_seq`) to find the segments holding dead records."""
        out: dict[int, int] = {}
        if not bases:
            return out
        with self._lock:
            entries = self._entries
            e = bisect.bisect_left(entries, (bases[first], -1, -1, -1))
            j = first
            for start, seq, _, _ in entries[e:]:
                j = bisect.bisect_right(bases, start, j) - 1
                if out.get(j, -1) < seq:
                    out[j] = seq
        return out

    # ------------------------------------------------------------------ marking
    @contextlib.contextmanager
    def locked(self):
        """Exclusive across processes: markers, a rewrite, and a compaction's swap (which fixes
        the sequence number its output records), hold it; on the file `marks` names, the one
        appended to (a rewrite a kill interrupted is finished first)."""
        with self._lock:
            while True:
                self._open(create=True)
                fd = self._fd
                fcntl.flock(fd, fcntl.LOCK_EX)
                self._refresh_locked()
                if self._fd == fd and not self.moved:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self.path + TMP_SUFFIX)  # a rewrite's, killed before MOVED
                    break
                if self._fd == fd:  # MOVED, never renamed: killed mid-rewrite; finish it
                    self._finish_rename()
                if self._fd == fd:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                # else: the old file's descriptor is closed, and its lock with it
            try:
                yield
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def mark(self, runs: list[tuple[int, int]], measure: Measure) -> int:
        """Mark the offsets of `runs`; `measure` cuts the runs not marked yet into per-segment
        entries with their bytes. Returns how many records were newly marked."""
        with self.locked():
            fresh = [piece for lo, hi in runs for piece in self.unmarked(lo, hi)]
            entries = measure(fresh) if fresh else []
            if not entries:
                return 0
            data = b"".join(_pack(a, b, nbytes) for a, b, nbytes, _ in entries)
            at = self._slot * ENTRY_SIZE
            self._reserve(at + len(data))
            os.pwrite(self._fd, data, at)
            os.fdatasync(self._fd)
            self._refresh_locked()
            return sum(e[3] for e in entries)

    def _reserve(self, need: int) -> None:
        size = os.fstat(self._fd).st_size
        if need <= size:
            return
        grow = -(-need // MARKS_STEP) * MARKS_STEP
        try:
            os.posix_fallocate(self._fd, size, grow - size)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                os.ftruncate(self._fd, size)  # give back a partial reservation
                raise StoreFullError(f"no space left to record marks in {self.path}") from exc
            raise

    def entries(self) -> list[tuple[int, int, int]]:
        """(start, end, sequence number) of every entry read, in file order."""
        with self._lock:
            return [(start, end, seq) for start, seq, _, end in self._in_order()]

    # ------------------------------------------------------------------ rewriting
    def rewrite(self, keep: Callable[[int, int, int], bool]) -> tuple[int, int]:
        """Replace the file by one holding the entries `keep(start, end, seq)` is true of (see
        the module docstring); returns (entries before, entries after). Call it where no
        compaction is between its snapshot and its swap (under the compaction lock)."""
        with self.locked():
            if self._fd < 0 or not self._entries:
                return len(self._entries), len(self._entries)
            before = len(self._entries)
            kept = [(start, end, nbytes) for start, seq, nbytes, end in self._in_order()
                    if keep(start, end, seq)]
            self._replace(kept)
            return before, len(kept)

    def _in_order(self) -> list[tuple[int, int, int, int]]:
        return sorted(self._entries, key=lambda e: e[1])

    def _replace(self, kept: list[tuple[int, int, int]]) -> None:
        """Under the flock of the current file: write its replacement with `kept` (numbered from
        this file's count on), MOVED here, the rename; the cache then follows the new file."""
        tmp = self.path + TMP_SUFFIX
        data = _pack(_SPECIAL, self.count, _FIRST) + b"".join(_pack(*e) for e in kept)
        fd = temporary(tmp, os.O_WRONLY)
        try:
            size = -(-len(data) // MARKS_STEP) * MARKS_STEP
            os.posix_fallocate(fd, 0, size)
            os.pwrite(fd, data, 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        at = self._slot * ENTRY_SIZE
        self._reserve(at + ENTRY_SIZE)
        os.pwrite(self._fd, _pack(_SPECIAL, 0, _MOVED), at)
        os.fdatasync(self._fd)
        self._finish_rename()

    def _finish_rename(self) -> None:
        """The rename of a replacement MOVED announces (written whole and synced before MOVED
        was), the directory synced; the cache then follows the new file."""
        try:
            os.replace(self.path + TMP_SUFFIX, self.path)
        except FileNotFoundError:   # removed by hand: a replacement with every entry read here
            self.moved = False
            self._replace([(start, end, nbytes) for start, _, nbytes, end in self._in_order()])
            return
        fsync_directory(os.path.dirname(self.path) or ".")
        self._refresh_locked()  # meets MOVED, follows the rename, reads the new file

    def close(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1


def _pack(start: int, end: int, nbytes: int) -> bytes:
    head = struct.pack("<QQI", start, end, nbytes)
    return head + struct.pack("<I", zlib.crc32(head))
