"""LocalReads: a log's reads from its local segments (start, end, read, scan, offset_for_time) and
its marks applied to records read elsewhere; what `CommitLog` reads through without an archive,
and the local side (`commitlog.archive.tiered.LocalSide`) of its reads across both tiers.

Thread-safe as its SegmentList is (a scan iterator has one consumer at a time).
"""

from __future__ import annotations

from collections.abc import Iterator

from ..arguments import check_offset, check_scan_range, check_timestamp
from ..record import Record
from . import gapcheck, reading, timelookup
from .segment_list import SegmentList

__all__ = ["LocalReads"]


class LocalReads:
    """The reads of the segments `segs` lists; `readonly`: another process writes them, so the
    end is caught up before it is told. Arguments are checked as `CommitLog`'s docstrings say."""

    def __init__(self, segs: SegmentList, readonly: bool) -> None:
        self._segs = segs
        self._readonly = readonly

    def start(self) -> int:
        """The first offset a local segment holds."""
        return self._segs.start()

    def retained_start(self) -> int:
        """The first offset retention has not removed (at or below `start`)."""
        return gapcheck.retained_start(self._segs)

    def end(self) -> int:
        """The next offset to be written (read-only: as far as written so far)."""
        if self._readonly:
            self._segs.catch_up()
        return self._segs.end()

    def read(self, offset: int) -> Record:
        check_offset("offset", offset, self._segs)
        return reading.read(self._segs, offset)

    def scan(self, start: int | None, end: int | None, zero_copy: bool) -> reading.Scan:
        check_scan_range(start, end)
        segs = self._segs
        offset = segs.start() if start is None else start
        if offset < segs.start():
            if offset < gapcheck.retained_start(segs):
                raise segs.out_of_range(offset)  # removed by retention: names the start
            offset = segs.start()  # before the first segment, a compaction's gap: passed like any
        return reading.scan(segs, offset, end, zero_copy)

    def chunks(self, offset: int, end: int | None, zero_copy: bool) -> Iterator[list[Record]]:
        return self.scan(offset, end, zero_copy).chunks

    def offset_for_time(self, timestamp_ms: int) -> int | None:
        check_timestamp("timestamp_ms", timestamp_ms)
        return timelookup.offset_for_time(self._segs, timestamp_ms)

    def live(self, records: list[Record]) -> list[Record]:
        """`records` (read from the archive) without those the local marks say are dead."""
        marks = self._segs.marks
        marks.refresh()
        if records and marks.starts and marks.any_in(records[0].offset, records[-1].offset + 1):
            return [r for r in records if not marks.is_marked(r.offset)]
        return records

    def is_marked(self, offset: int) -> bool:
        return self._segs.marks.is_marked(offset)
