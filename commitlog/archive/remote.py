"""Reading a log's archived segments on the tier: a scan or a record by offset, fetched by byte
ranges, never whole segments.

The manifest lists the archived segments. A segment's index object (fetched whole, a few KiB per
MiB of data, and verified against the SHA-256 the manifest records) says at which byte an offset's
records start; data is fetched from there in aligned chunks of `CHUNK` bytes through a cache of a
bounded size (least recently used chunks go first), so a consumer re-reading a range, or several
scans of one range, ask the tier once. Every record is verified by its own CRC as the store's
reader does; a record that does not verify is an `ArchiveCorruptError` naming the object and
byte. Records marked dead after a segment was archived are read from the archive as they were
written (marks stay on the host that made them).

Thread-safe: the cache and the parsed indexes take a lock; a scan iterator has one consumer.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Iterator

from ..errors import ArchiveCorruptError
from ..layout import segment_name
from .. import record as rec
from ..record import Record
from ..segments.index import SegmentSummary, parse_sealed
from ..segments.reading import read_records
from .log_archive import LogArchive, index_name
from .manifest import ArchivedSegment, Manifest
from .tiers import sha256_hex

__all__ = ["CHUNK", "DEFAULT_CACHE_BYTES", "ArchiveReader"]

CHUNK = 1 << 20                       # bytes fetched at a time, and the cache's unit
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
    """Fetched chunks by (key, number), least recently used out first beyond `limit` bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self._lock = threading.Lock()
        self._chunks: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self.fetches = 0

    def get(self, key: tuple[str, int]) -> bytes | None:
        with self._lock:
            data = self._chunks.get(key)
            if data is not None:
                self._chunks.move_to_end(key)
            return data

    def put(self, key: tuple[str, int], data: bytes) -> None:
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
        """Lists of records from `start` up to `end` (exclusive; default: the archive's end)."""
        stop = self.end_offset if end is None else min(end, self.end_offset)
        offset = start
        while offset < stop:
            segment = self.segment_at(offset)
            if segment is None or segment.base_offset >= stop:
                return
            offset = max(offset, segment.base_offset)
            yield from self._scan_segment(segment, offset, stop)
            offset = max(offset, segment.end_offset)

    def _scan_segment(self, segment: ArchivedSegment, offset: int, stop: int) -> Iterator[list[Record]]:
        summary = self._index(segment)
        rel, pos = summary.floor(offset - segment.base_offset)
        current = segment.base_offset + rel
        key = self.archive.key(segment_name(segment.base_offset))
        window, window_start = b"", 0
        while current < stop and pos < segment.bytes:
            at = pos - window_start
            if not 0 <= at < len(window):
                window, window_start, at = self._window(key, segment.bytes, pos), pos, 0
            records, end_at, current = read_records(window, at, len(window), current, stop, False)
            if end_at == at:
                if _whole_record_at(window, at) or window_start + len(window) >= segment.bytes:
                    raise ArchiveCorruptError(self.archive.tier.url, key, f"no valid record at byte {pos}")
                # The record crosses into the next chunk: read on with both.
                window = window[at:] + self._window(key, segment.bytes, window_start + len(window))
                window_start = pos
                continue
            pos = window_start + end_at
            wanted = [r for r in records if r.offset >= offset]
            if wanted:
                yield wanted

    def _window(self, key: str, size: int, pos: int) -> bytes:
        """The bytes of object `key` (`size` long) from `pos` to the end of its chunk."""
        number = pos // CHUNK
        chunk = self.cache.get((key, number))
        if chunk is None:
            first = number * CHUNK
            chunk = self.archive.tier.read_range(key, first, min(CHUNK, size - first))
            self.cache.put((key, number), chunk)
        return chunk[pos - number * CHUNK:]

    def _index(self, segment: ArchivedSegment) -> SegmentSummary:
        with self._lock:
            summary = self._indexes.get(segment.base_offset)
            if summary is not None:
                self._indexes.move_to_end(segment.base_offset)
                return summary
        key = self.archive.key(index_name(segment.base_offset))
        data = self.archive.tier.read(key)
        if data is None:
            raise ArchiveCorruptError(self.archive.tier.url, key, "missing, though the manifest lists it")
        if sha256_hex(data) != segment.index_sha256:
            raise ArchiveCorruptError(self.archive.tier.url, key, "SHA-256 differs from the manifest's")
        summary = parse_sealed(data)
        if summary is None:
            raise ArchiveCorruptError(self.archive.tier.url, key, "not a sealed index")
        with self._lock:
            self._indexes[segment.base_offset] = summary
            while len(self._indexes) > _INDEXES_KEPT:
                self._indexes.popitem(last=False)
        return summary
