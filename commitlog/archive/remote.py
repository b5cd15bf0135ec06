"""Reading a log's archived segments on the tier: a scan or a record by offset, fetched by byte
ranges from objects checked against the manifest.

The manifest lists the archived segments. A segment's index object (fetched whole, a few KiB per
MiB of data, verified against the SHA-256 the manifest records, and what it records against the
entry's `bytes` and offsets) says at which byte an offset's records start. Before the first record
of a data object is served, the object is checked whole against its entry (size, SHA-256:
commitlog.archive.object_check; a scan checks the next objects while it decodes one, their ranges
fetched in parallel: commitlog.archive.read_ahead, which bounds what it holds and stops it with
the scan). Data is then read in aligned ranges, `CHUNK` bytes for a read of one offset and
`SCAN_WINDOW` bytes for a scan (which fetches the next window while it decodes one), through a
cache of a bounded size (least recently used ranges go first), so a consumer re-reading a range,
or several scans of one range, ask the tier once; a range fetched again is checked against the
whole check's hash states. Every record is verified by its own CRC as the store's reader does; a
record that does not verify is an `ArchiveCorruptError` naming the object and byte. Records marked
dead after a segment was archived are read from the archive as they were written (marks stay on
the host that made them).

Thread-safe: the cache, the parsed indexes and the checks take a lock; a scan iterator has one consumer.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from concurrent.futures import Future
from collections.abc import Iterator

from ..errors import ArchiveCorruptError
from .. import record as rec
from ..record import Record
from ..segments.index import SegmentSummary, parse_sealed
from ..segments.reading import read_records
from .log_archive import LogArchive
from .manifest import ArchivedSegment, Manifest
from .object_check import Chain, CheckedObjects
from .read_ahead import JOBS_AHEAD, Closed, ReadAhead, outcome
from .tiers import sha256_hex

__all__ = ["CHUNK", "DEFAULT_CACHE_BYTES", "ArchiveReader"]

CHUNK = 1 << 20                       # bytes a read of one offset fetches (and caches) at a time
SCAN_WINDOW = 8 << 20                 # bytes a scan fetches (and caches) at a time, one window ahead
DEFAULT_CACHE_BYTES = 64 << 20
_INDEXES_KEPT = 256                   # parsed index objects kept (each a few KiB per MiB of data)


def _whole_record_at(window: bytes, at: int) -> bool:
    """Whether the frame at `at` says it ends inside `window` (so a record that does not decode
    there is damaged, not cut by the window's end)."""
    if len(window) - at < rec.HEADER_SIZE:
        return False
    length = rec.HEADER.unpack_from(window, at)[0]
    return at + rec.FRAME_SIZE + length <= len(window)


class _Chunks:
    """Fetched byte ranges by (key, unit, number), least recently used out first beyond `limit` bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self._lock = threading.Lock()
        self._chunks: OrderedDict[tuple, bytes] = OrderedDict()
        self.fetches = 0

    def get(self, key: tuple) -> bytes | None:
        with self._lock:
            data = self._chunks.get(key)
            if data is not None:
                self._chunks.move_to_end(key)
            return data

    def put(self, key: tuple, data: bytes) -> None:
        with self._lock:
            self.fetches += 1
            if key in self._chunks or len(data) > self.limit:
                return
            self._chunks[key] = data
            self.size += len(data)
            while self.size > self.limit:
                _, dropped = self._chunks.popitem(last=False)
                self.size -= len(dropped)


class ArchiveReader:
    """The records of one log's archived segments (see the module docstring)."""

    def __init__(self, archive: LogArchive, *, cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.archive = archive
        self.cache = _Chunks(cache_bytes)
        self._lock = threading.Lock()
        self._manifest: Manifest | None = None
        self._bases: list[int] = []
        self._indexes: OrderedDict[int, SegmentSummary] = OrderedDict()
        self._fetching: dict[tuple, Future] = {}     # windows being fetched ahead of a scan
        self.checked = CheckedObjects(archive.tier.url)
        self._checking: dict[tuple, Future] = {}     # objects being checked ahead of a scan
        self.read_ahead_peak = 0                     # the most bytes a scan's read-ahead held

    # ------------------------------------------------------------------ the manifest
    def manifest(self, *, refresh: bool = False) -> Manifest:
        """The manifest on the tier, read once and again on `refresh`."""
        with self._lock:
            manifest = self._manifest
        if manifest is None or refresh:
            manifest = self.archive.manifest()
            with self._lock:
                self._manifest, self._bases = manifest, [s.base_offset for s in manifest.segments]
        return manifest

    @property
    def start_offset(self) -> int:
        """The first offset the archive holds (its manifest's start, or its first segment's base)."""
        manifest = self.manifest()
        return manifest.segments[0].base_offset if manifest.segments else manifest.start_offset

    @property
    def end_offset(self) -> int:
        return self.manifest().end_offset

    def segment_at(self, offset: int) -> ArchivedSegment | None:
        """The archived segment holding `offset`, else the first one after it, else None."""
        manifest = self.manifest()
        i = bisect.bisect_right(self._bases, offset) - 1
        if i >= 0 and offset < manifest.segments[i].end_offset:
            return manifest.segments[i]
        return manifest.segments[i + 1] if i + 1 < len(manifest.segments) else None

    # ------------------------------------------------------------------ reading
    def scan(self, start: int, end: int | None = None) -> Iterator[list[Record]]:
        """Lists of records from `start` up to `end` (exclusive; default: the archive's end). What
        it fetches ahead is cancelled when it ends, early or not (commitlog.archive.read_ahead)."""
        stop = self.end_offset if end is None else min(end, self.end_offset)
        ahead = ReadAhead()
        try:
            offset = start
            while offset < stop:
                segment = self.segment_at(offset)
                if segment is None or segment.base_offset >= stop:
                    return
                offset = max(offset, segment.base_offset)
                if stop - offset > 1:
                    for following in self._following(segment, stop):
                        self._check_ahead(following, ahead)
                yield from self._scan_segment(segment, offset, stop, ahead)
                offset = max(offset, segment.end_offset)
        finally:
            ahead.close()
            with self._lock:
                self.read_ahead_peak = max(self.read_ahead_peak, ahead.peak)

    def _following(self, segment: ArchivedSegment, stop: int) -> list[ArchivedSegment]:
        """The segments after `segment` a scan to `stop` checks meanwhile: at most JOBS_AHEAD, and
        only while they fit in the cache beside it (the next one in any case)."""
        out: list[ArchivedSegment] = []
        held = segment.bytes
        while len(out) < JOBS_AHEAD:
            following = self.segment_at((out[-1] if out else segment).end_offset)
            if following is None or following.base_offset >= stop or \
                    (out and held + following.bytes > self.cache.limit):
                break
            out.append(following)
            held += following.bytes
        return out

    def _scan_segment(self, segment: ArchivedSegment, offset: int, stop: int,
                      ahead: ReadAhead) -> Iterator[list[Record]]:
        summary = self._index(segment)
        rel, pos = summary.floor(offset - segment.base_offset)
        current = segment.base_offset + rel
        key = self.archive.key(segment.data_file)
        size = segment.bytes
        self._chain(key, segment, ahead)     # the object is the manifest's before a record is served
        # A scan fetches large windows ahead of itself; a read of one offset, one chunk.
        unit = CHUNK if stop - offset <= 1 else SCAN_WINDOW
        following = ahead if unit == SCAN_WINDOW else None
        number = pos // unit
        window = self._unit(key, segment, number, unit, following)
        at = pos - number * unit
        while current < stop and pos < size:
            if at >= len(window):
                number += 1
                window, at = self._unit(key, segment, number, unit, following), 0
            records, end_at, current = read_records(window, at, len(window), current, stop, False)
            if end_at == at:
                if _whole_record_at(window, at) or (number + 1) * unit >= size:
                    raise ArchiveCorruptError(self.archive.tier.url, key, f"no valid record at byte {pos}")
                # One record crosses into the next window(s): decode it from its parts alone.
                joined, number, window, at = self._crossing(key, segment, unit, number, window[at:], ahead)
                records, end_at, current = read_records(joined, 0, len(joined), current, stop, False)
                if end_at != len(joined):
                    raise ArchiveCorruptError(self.archive.tier.url, key, f"no valid record at byte {pos}")
            else:
                at = end_at
            pos = number * unit + at
            wanted = [r for r in records if r.offset >= offset]
            if wanted:
                yield wanted

    def _unit(self, key: str, segment: ArchivedSegment, number: int, unit: int,
              ahead: ReadAhead | None = None) -> bytes:
        """Bytes [number * unit, (number + 1) * unit) of object `key` (`segment`'s), from the cache
        or the tier; with `ahead`, the next unit is fetched meanwhile, in the background, into the cache."""
        wanted = (key, unit, number)
        data = self.cache.get(wanted)
        if data is None and unit < SCAN_WINDOW:      # inside a window a scan or a check cached
            within = self.cache.get((key, SCAN_WINDOW, number * unit // SCAN_WINDOW))
            if within is not None:
                first = number * unit % SCAN_WINDOW
                data = within[first:first + unit]
        if data is None:
            with self._lock:
                pending = self._fetching.get(wanted)
            data = None if pending is None else outcome(pending)
            if data is None:
                data = self._fetch(key, segment, number, unit)
                self.cache.put(wanted, data)
        if ahead is not None and (number + 1) * unit < segment.bytes:
            self._fetch_ahead(key, segment, number + 1, unit, ahead)
        return data

    def _fetch_ahead(self, key: str, segment: ArchivedSegment, number: int, unit: int,
                     ahead: ReadAhead) -> None:
        """Fetch unit `number` of `key` into the cache in the background (unless it is there)."""
        wanted = (key, unit, number)
        size = min(unit, segment.bytes - number * unit)
        chain = self._chain(key, segment)                # checked: the scan is reading it
        with self._lock:
            if wanted in self._fetching or self.cache.get(wanted) is not None:
                return
            try:
                pending = self._fetching[wanted] = ahead.submit(
                    lambda: self._fetch(key, segment, number, unit, chain), size)
            except Closed:
                return
        pending.add_done_callback(lambda done: self._landed(wanted, done, ahead, size))

    def _crossing(self, key: str, segment: ArchivedSegment, unit: int, number: int,
                  tail: bytes, ahead: ReadAhead) -> tuple[bytes, int, bytes, int]:
        """The record starting with `tail` (the end of window `number`), whole, joined from the
        windows after it; with the window it ends in, that window's number, and where in it it ends."""
        need = None
        parts = [tail]
        have = len(tail)
        while True:
            number += 1
            window = self._unit(key, segment, number, unit, ahead) if number * unit < segment.bytes else b""
            if need is None and have + len(window) >= rec.HEADER_SIZE:
                head = b"".join(parts) + window[:rec.HEADER_SIZE]
                need = rec.FRAME_SIZE + rec.HEADER.unpack_from(head, 0)[0]
            if not window or (need is not None and have + len(window) >= need):
                used = len(window) if need is None else need - have
                return b"".join([*parts, window[:used]]), number, window, used
            parts.append(window)
            have += len(window)

    def _landed(self, wanted: tuple, done: Future, ahead: ReadAhead, size: int) -> None:
        """A window fetched ahead went into the cache (or, failed or cancelled, is fetched again
        when needed)."""
        if not done.cancelled() and done.exception() is None:
            self.cache.put(wanted, done.result())
        ahead.taken(size)
        with self._lock:
            self._fetching.pop(wanted, None)

    def _fetch(self, key: str, segment: ArchivedSegment, number: int, unit: int,
               chain: Chain | None = None) -> bytes:
        """Window `number` of `unit` bytes from the tier, compared with the object's check."""
        chain = self._chain(key, segment) if chain is None else chain
        first = number * unit
        expected = min(unit, segment.bytes - first)
        data = self.archive.tier.read_range(key, first, expected)
        return self.checked.check_range(key, chain, first, data, expected)

    def _chain(self, key: str, segment: ArchivedSegment, ahead: ReadAhead | None = None) -> Chain:
        """Data object `key` checked whole against `segment` (commitlog.archive.object_check),
        here or by a check started ahead of a scan; its windows go to the cache meanwhile."""
        chain = self.checked.chain(key, segment)
        if chain is not None:
            return chain
        with self._lock:
            pending = self._checking.get((key, segment.sha256))
        chain = None if pending is None else outcome(pending)    # None: its scan stopped first
        return chain if chain is not None else self._check(key, segment, ahead)

    def _check(self, key: str, segment: ArchivedSegment, ahead: ReadAhead | None = None,
               indexed: bool = False) -> Chain:
        """The whole check of data object `key`; `indexed`: its index object is read and checked
        first (a check ahead of a scan, which then finds both done)."""
        if indexed:
            self._index(segment)
        tier = self.archive.tier
        own = ahead is None
        ahead = ReadAhead() if own else ahead

        def fetch(n: int) -> bytes:
            return tier.read_range(key, n * SCAN_WINDOW, min(SCAN_WINDOW, segment.bytes - n * SCAN_WINDOW))

        try:
            return self.checked.check_whole(key, segment, tier.size(key), SCAN_WINDOW,
                                            lambda sizes: ahead.in_order(fetch, sizes),
                                            lambda n, data: self.cache.put((key, SCAN_WINDOW, n), data))
        finally:
            if own:
                ahead.close()

    def _check_ahead(self, segment: ArchivedSegment, ahead: ReadAhead) -> None:
        """Start checking `segment`'s data object in the background (a scan is about to need it)."""
        key = self.archive.key(segment.data_file)
        wanted = (key, segment.sha256)
        with self._lock:
            if wanted in self._checking or self.checked.chain(key, segment) is not None:
                return
            try:
                pending = self._checking[wanted] = ahead.start(lambda: self._check(key, segment, ahead, True))
            except Closed:
                return
        pending.add_done_callback(lambda _: self._checked(wanted))

    def _checked(self, wanted: tuple) -> None:
        with self._lock:
            self._checking.pop(wanted, None)

    def _index(self, segment: ArchivedSegment) -> SegmentSummary:
        with self._lock:
            summary = self._indexes.get(segment.base_offset)
            if summary is not None:
                self._indexes.move_to_end(segment.base_offset)
                return summary
        key = self.archive.key(segment.index_file)
        data = self.archive.tier.read(key)
        if data is None:
            raise ArchiveCorruptError(self.archive.tier.url, key, "missing, though the manifest lists it")
        if sha256_hex(data) != segment.index_sha256:
            raise ArchiveCorruptError(self.archive.tier.url, key, "SHA-256 differs from the manifest's")
        summary = parse_sealed(data)
        if summary is None:
            raise ArchiveCorruptError(self.archive.tier.url, key, "not a sealed index")
        if summary.base is not None and summary.base != segment.base_offset:
            raise ArchiveCorruptError(self.archive.tier.url, key, f"records base offset {summary.base}, "
                                      f"the manifest's `base_offset` says {segment.base_offset}")
        end = summary.end_offset(segment.base_offset)
        if summary.used_bytes != segment.bytes or end != segment.end_offset:
            field, says, found = ("bytes", segment.bytes, f"{summary.used_bytes} bytes of data") \
                if summary.used_bytes != segment.bytes else \
                ("end_offset", segment.end_offset, f"offsets [{segment.base_offset}, {end})")
            raise ArchiveCorruptError(self.archive.tier.url, key, f"records {found}, the manifest's "
                                      f"`{field}` says {says}")
        with self._lock:
            self._indexes[segment.base_offset] = summary
            while len(self._indexes) > _INDEXES_KEPT:
                self._indexes.popitem(last=False)
        return summary
