"""A log's manifest on the archive tier: which segments are archived, and the truth for readers.

Object `<log>/manifest.json` beside the segments it lists (`<log>/<base>.log`, `<base>.index`);
a copy is cached in the log directory (layout.ARCHIVE_MANIFEST_FILE). A segment is archived once
the manifest lists it: its objects are written and verified first, so a crash between the two
leaves objects the next upload writes again, never a listed segment without its objects.

    {"format": 1, "log": "<name>", "start_offset": <int>,
     "segments": [{"base_offset", "end_offset", "bytes", "sha256", "index_bytes",
                   "index_sha256", "last_timestamp_ms", "archived_at_ms"}, ...]}

`start_offset`: the first offset the archive still holds (its total retention moves it).
Immutable values: thread- and process-safe.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, asdict, dataclass, field, fields, replace

from .validation import FORMAT, manifest_fields

MANIFEST_KEY = "manifest.json"


@dataclass(frozen=True)
class ArchivedSegment:
    base_offset: int
    end_offset: int
    bytes: int                        # the segment's bytes up to its end marker
    sha256: str
    index_bytes: int
    index_sha256: str
    last_timestamp_ms: int | None
    archived_at_ms: int


SEGMENT_FIELDS = frozenset(f.name for f in fields(ArchivedSegment))
SEGMENT_REQUIRED = frozenset(f.name for f in fields(ArchivedSegment)
                             if f.default is MISSING and f.default_factory is MISSING)


@dataclass(frozen=True)
class Manifest:
    log: str
    start_offset: int = 0
    segments: tuple[ArchivedSegment, ...] = field(default_factory=tuple)

    @property
    def end_offset(self) -> int:
        """The offset after the last archived record (the start offset when none is)."""
        return self.segments[-1].end_offset if self.segments else self.start_offset

    def find(self, base_offset: int) -> ArchivedSegment | None:
        return next((s for s in self.segments if s.base_offset == base_offset), None)

    def covers(self, base_offset: int, end_offset: int) -> bool:
        """Whether a segment of these offsets is archived whole: listed at its base up to its end
        at least (a local segment a compaction merged after its head was uploaded is not)."""
        found = self.find(base_offset)
        return found is not None and found.end_offset >= end_offset

    def holding(self, offset: int) -> ArchivedSegment | None:
        """The archived segment whose offsets include `offset`, if any."""
        return next((s for s in self.segments if s.base_offset <= offset < s.end_offset), None)

    def with_segment(self, segment: ArchivedSegment) -> "Manifest":
        """The manifest listing `segment` in place of the entries it supersedes (`superseded_by`)."""
        gone = {s.base_offset for s in self.superseded_by(segment)}
        kept = [s for s in self.segments if s.base_offset != segment.base_offset and s.base_offset not in gone]
        return replace(self, segments=tuple(sorted([*kept, segment], key=lambda s: s.base_offset)))

    def superseded_by(self, segment: ArchivedSegment) -> list[ArchivedSegment]:
        """The listed entries, other than one at its own base, whose base lies inside `segment`'s
        offsets: segments a compaction merged into it after they were uploaded (its output holds
        what of their records stayed live), so listing both would overlap."""
        return [s for s in self.segments
                if s.base_offset != segment.base_offset and segment.base_offset <= s.base_offset < segment.end_offset]

    def without(self, bases: tuple[int, ...]) -> "Manifest":
        """The manifest less the segments of these base offsets."""
        gone = set(bases)
        return replace(self, segments=tuple(s for s in self.segments if s.base_offset not in gone))

    def without_before(self, offset: int) -> "Manifest":
        """The manifest once total retention removed every segment ending at or before
        `offset`."""
        kept = tuple(s for s in self.segments if s.end_offset > offset)
        return replace(self, start_offset=max(self.start_offset, offset), segments=kept)

    def to_json(self) -> bytes:
        body = {"format": FORMAT, "log": self.log, "start_offset": self.start_offset,
                "segments": [asdict(s) for s in self.segments]}
        return json.dumps(body, indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, url: str, key: str) -> "Manifest":
        """Parse a manifest; ArchiveCorruptError naming `url`, `key` and the field for anything
        else (commitlog.archive.validation)."""
        body = manifest_fields(data, url, key, SEGMENT_FIELDS, SEGMENT_REQUIRED)
        return cls(body["log"], body["start_offset"],
                   tuple(ArchivedSegment(**s) for s in body["segments"]))
