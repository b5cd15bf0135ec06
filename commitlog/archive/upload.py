"""The upload pass: every sealed segment not yet archived goes to the tier, oldest first, and is
recorded in the manifest once its objects are verified. `upload_due` is the one upload loop:
`upload_sealed` runs it bare, the sidecar's uploader (retention.archiving.uploader) with its
audited `send`.

Resumable by construction: objects are written under their final keys (whole, verified) and the
manifest, rewritten at most once a second during a pass and at its end (`ManifestWriter`), is the
one record of what is archived. A pass killed anywhere leaves at most a second's segments
unlisted; the next pass writes them again.

Time and sleeping are passed in (`now_ms`, `Throttle`'s clock and sleep). One pass per log at a
time; not thread-safe per log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import BinaryIO

from ..errors import ArchiveError
from ..segments.segment import SegmentInfo
from .log_archive import LogArchive
from .manifest import ArchivedSegment, Manifest

log = logging.getLogger("commitlog")


class Throttle:
    """Paces reads to at most `bytes_per_s` on average since the throttle was made (None: no
    cap). Shared by the uploads of one pass."""

    def __init__(self, bytes_per_s: int | None, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.bytes_per_s = bytes_per_s
        self._clock, self._sleep = clock, sleep
        self._start = clock()
        self.sent = 0

    def took(self, n: int) -> None:
        """`n` more bytes were read: sleep until the average is back under the cap."""
        self.sent += n
        if self.bytes_per_s:
            ahead = self.sent / self.bytes_per_s - (self._clock() - self._start)
            if ahead > 0:
                self._sleep(ahead)

    def pace(self, source: BinaryIO) -> BinaryIO:
        return _Paced(source, self)


class _Paced:
    def __init__(self, source: BinaryIO, throttle: Throttle) -> None:
        self._source, self._throttle = source, throttle

    def read(self, n: int = -1) -> bytes:
        data = self._source.read(n)
        self._throttle.took(len(data))
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._source.seek(offset, whence)

    def tell(self) -> int:
        return self._source.tell()


def due(segments: list[SegmentInfo], manifest: Manifest, *, now_ms: int,
        upload_after_s: float = 0.0) -> list[SegmentInfo]:
    """The sealed segments of `segments` the manifest does not cover, oldest first, up to the
    first one sealed for less than `upload_after_s` at `now_ms` (uploads go in offset order).
    None the archive's total retention already let go (ending at or before its start)."""
    out = []
    for info in segments:
        if info.active or info.end_offset <= manifest.start_offset \
                or manifest.covers(info.base_offset, info.end_offset):
            continue
        if upload_after_s and now_ms / 1000 - info.mtime < upload_after_s:
            break      # (with none, a segment sealed within the millisecond of now_ms is due too)
        out.append(info)
    return out


class ManifestWriter:
    """Adds archived segments to a log's manifest and rewrites it on the tier at most once every
    `every_s` seconds, and on `flush`: a pass over many segments rewrites it a few times, not once
    a segment. `add` and `flush` return the tags of the segments the rewrite they did listed
    (empty when none was due). Not thread-safe: one upload pass owns it."""

    def __init__(self, archive: LogArchive, manifest: Manifest, *, every_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.archive, self.manifest = archive, manifest
        self._every, self._clock = every_s, clock
        self._written = clock()
        self.unlisted: list = []          # the tags of the segments added since the last rewrite
        self._superseded: list[ArchivedSegment] = []   # entries the next rewrite drops (with_segment)

    def add(self, segment: ArchivedSegment, tag: object = None) -> list:
        self._superseded += self.manifest.superseded_by(segment)
        self.manifest = self.manifest.with_segment(segment)
        self.unlisted.append(tag)
        return self.flush() if self._clock() - self._written >= self._every else []

    def flush(self) -> list:
        if not self.unlisted:
            return []
        self.archive.write_manifest(self.manifest)
        self._written = self._clock()
        listed, self.unlisted = self.unlisted, []
        superseded, self._superseded = self._superseded, []
        for entry in superseded:   # listed no more: their objects go (best effort, logged)
            try:
                self.archive.drop_objects(entry.base_offset)
            except (ArchiveError, OSError) as exc:
                log.warning("%s: left the objects of archived segment %d, which a compaction merged "
                            "into another, on the tier: %s", self.archive.name, entry.base_offset, exc)
        return listed


Send = Callable[[SegmentInfo, ManifestWriter], "list | None"]
"""Sends one segment's objects and adds it to the writer: the tags the writer's rewrite listed
meanwhile (`ManifestWriter.add`), or None when the segment was passed (gone from the log)."""


def upload_due(writer: ManifestWriter, segments: list[SegmentInfo], send: Send, *,
               listed: Callable[[list], None], stop: Callable[[], bool] = lambda: False,
               limit: int | None = None, flush: Callable[[ManifestWriter], list] = ManifestWriter.flush) -> None:
    """The upload loop, the one both `upload_sealed` and the sidecar's uploader run: `send` each
    of `segments` (due, oldest first) until `stop()` or `limit` sent, `listed(tags)` after each
    manifest rewrite that listed some, the last rewrite (`flush`) in any case, even when a send
    raised (what was archived before it stays listed)."""
    sent = 0
    try:
        for info in segments:
            if stop() or (limit is not None and sent >= limit):
                break
            tags = send(info, writer)
            if tags is None:
                continue
            sent += 1
            if tags:
                listed(tags)
    finally:
        tags = flush(writer)
        if tags:
            listed(tags)


def upload_sealed(archive: LogArchive, segments: list[SegmentInfo], *, now_ms: int,
                  upload_after_s: float = 0.0, throttle: Throttle | None = None,
                  limit: int | None = None, manifest_every_s: float = 1.0) -> list[ArchivedSegment]:
    """Upload the sealed segments of `segments` (a `CommitLog.segments()` listing) not in the
    manifest and sealed for `upload_after_s` at least, oldest first, at most `limit` of them;
    returns what was archived. An ArchiveError leaves the manifest listing every segment
    archived before it (ArchiveMissingError, uploading nothing, when the tier cannot prove it is
    the log's: `LogArchive.confirm`). A segment removed locally meanwhile is passed. `manifest_every_s`: how
    often the manifest is rewritten during the pass (0: after every segment). No audit: the
    sidecar's uploader (retention.archiving.uploader) runs the same loop with its own `send`."""
    writer = ManifestWriter(archive, archive.confirm(), every_s=manifest_every_s)
    pace = throttle.pace if throttle is not None else (lambda f: f)

    def send(info: SegmentInfo, writer: ManifestWriter) -> list | None:
        try:
            segment = archive.put_segment(info, now_ms, pace)
        except FileNotFoundError:
            return None   # removed by retention while we looked
        return writer.add(segment, segment)

    done: list[ArchivedSegment] = []
    upload_due(writer, due(segments, writer.manifest, now_ms=now_ms, upload_after_s=upload_after_s), send,
               listed=done.extend, limit=limit)
    return done
