"""A log's manifest on the archive tier: which segments are archived, and the truth for readers.

Object `<log>/manifest.json` beside the segments it lists (`<log>/<base>.log`, `<base>.index`);
a copy is cached in the log directory (layout.ARCHIVE_MANIFEST_FILE). A segment is archived once
the manifest lists it: its objects are written and verified first, so a crash between the two
leaves objects the next upload writes again, never a listed segment without its objects.

    {"format": 1, "log": "<name>", "start_offset": <int>,
     "segments": [{"base_offset", "end_offset", "bytes", "sha256", "index_bytes",
                   "index_sha256", "last_timestamp_ms", "archived_at_ms"[, "key", "index_key", "host"]}, ...]
     [, "jobs": [<job id>, ...], "spark_schema": "<StructType JSON>"]}

`start_offset`: the first offset the archive still holds (its total retention moves it).
`key`/`index_key`: an entry's objects under the log's folder when they are not `<base>.log` and
`<base>.index` (a cluster log's staged objects, commitlog.archive.versions); absent otherwise, so
a single host's manifest is byte for byte what it was. `host`: the host that staged a cluster
log's entry and keeps a copy of it (readers prefer it; absent in older manifests). `jobs` and `spark_schema`: a cluster log's
committed job ids (the newest KEEP_JOBS) and its Spark schema; absent on a single host's log.
Immutable values: thread- and process-safe.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, asdict, dataclass, field, fields, replace

from ..layout import index_path, segment_name
from .validation import FORMAT, manifest_fields

MANIFEST_KEY = "manifest.json"
KEEP_JOBS = 1000                      # committed job ids a cluster log's manifest remembers


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
    key: str | None = None            # the data object under the log's folder (default: by base)
    index_key: str | None = None      # the index object under the log's folder (default: by base)
    host: str | None = None           # the host that staged it and keeps a copy (a cluster log's)

    @property
    def data_file(self) -> str:
        """The data object's key relative to the log's folder."""
        return self.key or segment_name(self.base_offset)

    @property
    def index_file(self) -> str:
        """The index object's key relative to the log's folder."""
        return self.index_key or index_path(segment_name(self.base_offset))

    def to_dict(self) -> dict:
        """The manifest entry; `key`, `index_key` and `host` only when set."""
        return {k: v for k, v in asdict(self).items() if v is not None or k not in _OPTIONAL_KEYS}


_OPTIONAL_KEYS = ("key", "index_key", "host")
SEGMENT_FIELDS = frozenset(f.name for f in fields(ArchivedSegment))
SEGMENT_REQUIRED = frozenset(f.name for f in fields(ArchivedSegment)
                             if f.default is MISSING and f.default_factory is MISSING)


@dataclass(frozen=True)
class Manifest:
    log: str
    start_offset: int = 0
    segments: tuple[ArchivedSegment, ...] = field(default_factory=tuple)
    jobs: tuple[str, ...] = ()        # a cluster log's committed job ids, oldest first
    spark_schema: str | None = None   # a cluster log's Spark schema (StructType JSON)

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

    def with_job(self, job_id: str, segments: list[ArchivedSegment], spark_schema: str | None) -> "Manifest":
        """The manifest with one cluster job's `segments` appended (their offsets assigned by the
        caller from `end_offset`), `job_id` remembered (the newest KEEP_JOBS), and the schema."""
        return replace(self, segments=(*self.segments, *segments),
                       jobs=(*self.jobs, job_id)[-KEEP_JOBS:], spark_schema=spark_schema)

    def to_json(self) -> bytes:
        body = {"format": FORMAT, "log": self.log, "start_offset": self.start_offset,
                "segments": [s.to_dict() for s in self.segments]}
        if self.jobs:
            body["jobs"] = list(self.jobs)
        if self.spark_schema is not None:
            body["spark_schema"] = self.spark_schema
        return json.dumps(body, indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, url: str, key: str) -> "Manifest":
        """Parse a manifest; ArchiveCorruptError naming `url`, `key` and the field for anything
        else (commitlog.archive.validation)."""
        body = manifest_fields(data, url, key, SEGMENT_FIELDS, SEGMENT_REQUIRED)
        return cls(body["log"], body["start_offset"],
                   tuple(ArchivedSegment(**s) for s in body["segments"]),
                   tuple(body["jobs"]), body["spark_schema"])
