"""Reading across both tiers: a log opened with `CommitLog.open(path, archive=URL)`, and a log read
from its archive alone with `open_archive(URL, name)` (no local directory).

`TieredReads`, which a `CommitLog` opened with an archive holds, gives it its start (the
archive's, when the archive holds records the local disk no longer does) and sends `read`, `scan`
and `offset_for_time` below the local start to the archive (`commitlog.archive.remote`), the rest
to the local side (`LocalSide`): the same records, the same errors (an offset removed from both
tiers is `OffsetOutOfRangeError` naming the first offset either holds), the same API; local marks
hide archived records too. Writing, segments, consumer offsets and removal stay local.
`ArchivedLog` holds one with no local side, for a host that has only the URL.

Thread-safe as `CommitLog` is; the archive reader's cache is shared by the handle's readers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Protocol

from ..errors import CommitLogError, InvalidArgumentError, OffsetOutOfRangeError, OffsetRemovedError
from ..record import Record
from ..segments import reading
from ..arguments import check_offset, check_scan_range, check_timestamp, timestamp_ms_of
from .log_archive import LogArchive
from .remote import DEFAULT_CACHE_BYTES, ArchiveReader
from .tier_url import open_tier
from .tiers import Tier

__all__ = ["ArchivedLog", "LocalSide", "TieredReads", "archive_reader", "open_archive", "warn_if_empty"]

log = logging.getLogger("commitlog")
_warned: set[tuple[str, str]] = set()      # (tier URL, log name): said once per process
_warned_lock = threading.Lock()


def archive_reader(archive: str | Tier, log_dir: str | None, name: str | None = None, *,
                   cache_bytes: int = DEFAULT_CACHE_BYTES) -> ArchiveReader:
    """A reader of log `name` (default: `log_dir`'s name) on `archive`, a URL or an open tier."""
    tier = open_tier(archive) if isinstance(archive, str) else archive
    if not hasattr(tier, "read_range"):
        raise InvalidArgumentError(f"archive must be a URL or a tier (open_tier), got {archive!r}")
    return ArchiveReader(LogArchive(tier, log_dir, name), cache_bytes=cache_bytes)


def warn_if_empty(reader: ArchiveReader) -> None:
    """A WARNING, once per process for a tier and log, when the tier holds nothing for the log (no
    manifest): a mistyped URL would otherwise read as "nothing archived"."""
    archive = reader.archive
    try:
        manifest = reader.manifest()
    except (OSError, CommitLogError) as exc:     # the reads that need it will say so again
        log.warning("%s: cannot read the archive %s for log %s now: %s", archive.log_dir, archive.tier.url,
                    archive.name, exc)
        return
    if manifest.segments or manifest.start_offset:
        return
    with _warned_lock:
        if (archive.tier.url, archive.name) in _warned:
            return
        _warned.add((archive.tier.url, archive.name))
    log.warning("%s: the archive %s holds nothing for log %s (no %s/ manifest): reads see the local disk "
                "only; check the URL unless nothing was archived yet", archive.log_dir, archive.tier.url,
                archive.name, archive.name)


class LocalSide(Protocol):
    """The local segments of a log read across both tiers (`commitlog.segments.local_reads`):
    the offsets from `start()` on are read there, and its marks hide archived records too."""

    def start(self) -> int: ...
    def end(self) -> int: ...
    def read(self, offset: int) -> Record: ...
    def chunks(self, offset: int, end: int | None, zero_copy: bool) -> Iterator[list[Record]]: ...
    def offset_for_time(self, timestamp_ms: int) -> int | None: ...
    def live(self, records: list[Record]) -> list[Record]: ...
    def is_marked(self, offset: int) -> bool: ...


class TieredReads:
    """`start`, `read`, `scan` and `offset_for_time` over `archive` and, from its `start()` on,
    `local` (None: the archive is the whole log, as `ArchivedLog` reads it). Arguments are
    checked as `CommitLog`'s docstrings say; the caller checks the log is open."""

    def __init__(self, archive: ArchiveReader, local: LocalSide | None) -> None:
        self._archive = archive
        self._local = local

    def _local_start_seen(self) -> int:
        """The local start, with the archive's manifest read again when it ends before it (the
        disk evicted segments archived since the manifest was read)."""
        if self._local is None:
            return self._archive.end_offset          # nothing is local: the archive is the whole log
        local = self._local.start()
        if self._archive.end_offset < local:
            self._archive.manifest(refresh=True)
        return local

    def end(self) -> int:
        return self._archive.end_offset if self._local is None else self._local.end()

    def start(self) -> int:
        local = self._local_start_seen()
        archived = self._archive.start_offset
        return archived if archived < local and self._archive.end_offset > archived else local

    def retained_start(self) -> int:
        """As `start`: what the archive holds counts as kept."""
        return self.start()

    def read(self, offset: int) -> Record:
        if isinstance(offset, int) and offset < 0:      # as CommitLog.read says it
            raise OffsetOutOfRangeError(offset, self.start(), self.end())
        check_offset("offset", offset)
        local = self._local_start_seen()
        if offset < local:
            start = self.start()
            if offset < start:
                raise OffsetOutOfRangeError(offset, start, self.end())
            for records in self._chunks(offset, offset + 1, False):
                if records:
                    return records[0]
            following = next(iter(self._chunks(offset + 1, None, False)), [])
            end = self.end()
            marked = self._local is not None and self._local.is_marked(offset)
            why = "was marked dead" if marked else \
                "holds no live record (written dead, or removed by a compaction before it was archived)"
            raise OffsetRemovedError(offset, following[0].offset if following else end, start, end, why)
        if self._local is None:
            raise OffsetOutOfRangeError(offset, self._archive.start_offset, self._archive.end_offset)
        return self._local.read(offset)

    def scan(self, start: int | None, end: int | None, zero_copy: bool) -> reading.Scan:
        check_scan_range(start, end)
        first = self.start()
        offset = first if start is None else start
        if offset < first:
            raise OffsetOutOfRangeError(offset, first, self.end())
        return reading.Scan(self._chunks(offset, end, zero_copy))

    def _chunks(self, offset: int, end: int | None, zero_copy: bool) -> Iterator[list[Record]]:
        local = self._local_start_seen()
        if offset < local:
            for records in self._archive.scan(offset, local if end is None else min(end, local)):
                if self._local is not None:
                    records = self._local.live(records)
                if records:
                    yield records
            offset = local
        if self._local is not None and (end is None or offset < end):
            yield from self._local.chunks(offset, end, zero_copy)

    def offset_for_time(self, timestamp_ms: int) -> int | None:
        check_timestamp("timestamp_ms", timestamp_ms)
        local = self._local_start_seen()
        for segment in self._archive.manifest().segments:
            if segment.base_offset >= local:
                break
            if segment.last_timestamp_ms is not None and segment.last_timestamp_ms >= timestamp_ms:
                for records in self._chunks(segment.base_offset, min(segment.end_offset, local), False):
                    hit = next((r.offset for r in records if r.timestamp_ms >= timestamp_ms), None)
                    if hit is not None:
                        return hit
        return None if self._local is None else self._local.offset_for_time(timestamp_ms)


class ArchivedLog:
    """A log read from its archive alone: `start_offset`, `end_offset`, `read`, `scan`,
    `offset_for_time`, as `CommitLog`'s. Its manifest is read once; `refresh()` reads it again.
    Marks stay on the host that made them: none applies here."""

    def __init__(self, reader: ArchiveReader) -> None:
        self._archive = reader
        self._reads = TieredReads(reader, None)
        self.name = reader.archive.name

    @property
    def archive(self) -> ArchiveReader:
        return self._archive

    def refresh(self) -> None:
        self._archive.manifest(refresh=True)

    @property
    def start_offset(self) -> int:
        return self._archive.start_offset

    @property
    def end_offset(self) -> int:
        return self._archive.end_offset

    def read(self, offset: int) -> Record:
        return self._reads.read(offset)

    def scan(self, start: int | None = None, end: int | None = None, *, zero_copy: bool = False) -> reading.Scan:
        return self._reads.scan(start, end, zero_copy)

    def offset_for_time(self, timestamp_ms) -> int | None:
        """As `CommitLog.offset_for_time`: ms since the epoch or a timezone-aware datetime."""
        return self._reads.offset_for_time(timestamp_ms_of("timestamp_ms", timestamp_ms))

    def close(self) -> None:
        """Nothing is held open; for symmetry with `CommitLog`."""

    def __enter__(self) -> ArchivedLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_archive(url: str, name: str, *, endpoint: str | None = None, region: str | None = None,
                 cache_bytes: int = DEFAULT_CACHE_BYTES) -> ArchivedLog:
    """The log `name` on the archive at `url`, read-only, with no local directory."""
    return ArchivedLog(archive_reader(open_tier(url, endpoint=endpoint, region=region), None, name,
                                      cache_bytes=cache_bytes))
