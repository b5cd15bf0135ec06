"""The records of the audit trail: one frozen dataclass per kind of line, built by the writers and
turned into a line only by `retention.audit` (`entries.line_fields`, `AuditTrail`); a line's keys
follow its record's fields in order, so the format (`retention.audit`) is the fields' order.

Dataclasses, not pydantic models: the writers build one per removal from values already checked,
and nothing is parsed back into them, so validation would cost every removal and check nothing.
A field whose value is `OMIT` is left out of the line; a `stamp` field holds epoch seconds.
Immutable, so thread-safe.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from .entries import OMIT, AbortReason, Event

__all__ = ["AbortedEntry", "ArchiveDeletionEntry", "ArchivedEntry", "ClockAcceptedEntry", "ClockReturnedEntry",
           "ClockSetBackEntry", "ClockSteppedEntry", "CompactionAbortedEntry", "CompactionEntry",
           "CopyEvictionEntry", "DamagedEntry", "DeletionEntry", "PinnedBy", "RecoveredArchiveDeletionEntry",
           "RecoveredCompactionEntry", "RecoveredDeletionEntry", "UnconsumedRange", "UploadEntry"]


def stamp() -> Any:
    """A field of epoch seconds, written as `audit_time` (ISO 8601 UTC, milliseconds)."""
    return field(metadata={"stamp": True})


def _pick(source: object, names: tuple[str, ...], missing: object = KeyError) -> dict:
    """`names` of a record (its attributes) or of a line read back (its keys; a missing one raises
    KeyError, unless `missing` is given: then it stands for the value)."""
    if not isinstance(source, Mapping):
        return {k: getattr(source, k) for k in names}
    if missing is KeyError:
        return {k: source[k] for k in names}
    return {k: source.get(k, missing) for k in names}


@dataclass(frozen=True, kw_only=True)
class _Span:
    """The segment a line is about; its keys come first in an outcome read back from an intent."""

    log: Any
    path: Any
    segment: Any
    base_offset: Any
    end_offset: Any


@dataclass(frozen=True, kw_only=True)
class _Timed:
    """The time of a line."""

    time: float = stamp()


@dataclass(frozen=True, kw_only=True)
class _TimedSpan(_Span, _Timed):
    """The time of a line, then the segment it is about (`_Span`'s keys): a dataclass takes its
    bases' fields from the last base to the first."""


@dataclass(frozen=True, kw_only=True)
class _CompactionSpan:
    """The output a compaction line is about, then the time."""

    log: Any
    path: Any
    segment: Any
    first_offset: Any
    end_offset: Any
    time: float = stamp()


def _names(record: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(record) if f.name != "time")


_SPAN = _names(_Span)


@dataclass(frozen=True, kw_only=True)
class UnconsumedRange:
    """Offsets [first_offset, end_offset) consumer group `group` had not consumed."""

    group: str
    first_offset: int
    end_offset: int


@dataclass(frozen=True, kw_only=True)
class PinnedBy:
    """A process that held a force-removed segment open."""

    pid: int
    command: str


@dataclass(frozen=True, kw_only=True)
class DeletionEntry(_TimedSpan):
    """A head segment's removal: its `delete` intent and its `deleted` outcome. `archived`: the log's
    archive tier holds it (an eviction); `paced`: its bytes were freed at `disk.delete_rate`,
    `unpaced`: why that rate was not applied; `budget`: the figures of the shared byte budget that
    took it; `error`: the removal failed after the segment left."""

    bytes: int
    triggers: tuple[str, ...]
    forced: bool
    overridden_by: str | None
    unconsumed: tuple[UnconsumedRange, ...]
    pinned_by: tuple[PinnedBy, ...]
    archived: bool
    paced: bool
    unpaced: Any = OMIT
    budget: Any = OMIT
    error: Any = OMIT


_RECOVERED_DELETION = _SPAN + ("bytes", "triggers", "forced", "overridden_by", "unconsumed", "pinned_by",
                               "archived", "unpaced", "budget")


@dataclass(frozen=True, kw_only=True)
class RecoveredDeletionEntry(_TimedSpan):
    """The `deleted` outcome of a dead process's `delete` intent whose segment left the log: the
    intent's keys as read back (not `paced`: a crash's leftover went at once; a key the intent
    lacks is left out), and its time."""

    bytes: Any = OMIT
    triggers: Any = OMIT
    forced: Any = OMIT
    overridden_by: Any = OMIT
    unconsumed: Any = OMIT
    pinned_by: Any = OMIT
    archived: Any = OMIT
    unpaced: Any = OMIT
    budget: Any = OMIT
    intent_time: Any

    @classmethod
    def of(cls, intent: Mapping, at: float) -> RecoveredDeletionEntry:
        return cls(time=at, **_pick(intent, _RECOVERED_DELETION, OMIT), intent_time=intent.get("time"))


@dataclass(frozen=True, kw_only=True)
class AbortedEntry(_TimedSpan):
    """The `aborted` outcome of a removal's or an upload's intent (`covered_by`: the intent whose
    `deleted` line covers the segment; `error`: what failed)."""

    reason: AbortReason
    covered_by: Any = OMIT
    error: Any = OMIT

    @classmethod
    def of(cls, planned: object, at: float, reason: AbortReason, **extra: Any) -> AbortedEntry:
        """The abort of the intent of `planned` (a record, or an intent read back)."""
        return cls(time=at, **_pick(planned, _SPAN), reason=reason, **extra)


@dataclass(frozen=True, kw_only=True)
class CompactionEntry:
    """A compaction output: its `compact` intent, and its `compacted` outcome (`bytes_after`,
    `dropped` set). `input_inodes` let a later pass tell whether a dead process's output happened."""

    time: float = stamp()
    log: str
    path: str
    segment: str | None
    inputs: tuple[str, ...]
    first_offset: int
    end_offset: int
    bytes_before: int
    planned_bytes_after: int
    input_inodes: tuple[int, ...]
    bytes_after: Any = OMIT
    dropped: Any = OMIT


_COMPACTION_SPAN = _names(_CompactionSpan)


@dataclass(frozen=True, kw_only=True)
class CompactionAbortedEntry(_CompactionSpan):
    """The `aborted` outcome of a compaction output's intent."""

    reason: AbortReason
    error: Any = OMIT

    @classmethod
    def of(cls, planned: object, at: float, reason: AbortReason, **extra: Any) -> CompactionAbortedEntry:
        """The abort of the intent of `planned` (a record, or an intent read back)."""
        return cls(**_pick(planned, _COMPACTION_SPAN, None), time=at, reason=reason, **extra)


@dataclass(frozen=True, kw_only=True)
class RecoveredCompactionEntry(_CompactionSpan):
    """The `compacted` outcome of a dead process's compaction that passed its commit point
    (`dropped` null: only the dead process knew the counts)."""

    inputs: Any
    bytes_before: Any
    bytes_after: int
    dropped: None
    intent_time: Any

    @classmethod
    def of(cls, intent: Mapping, at: float, *, end_offset: Any, bytes_after: int) -> RecoveredCompactionEntry:
        span = {**_pick(intent, _COMPACTION_SPAN, None), "end_offset": end_offset}
        return cls(**span, time=at, inputs=intent.get("inputs"), bytes_before=intent.get("bytes_before"),
                   bytes_after=bytes_after, dropped=None, intent_time=intent.get("time"))


@dataclass(frozen=True, kw_only=True)
class UploadEntry(_TimedSpan):
    """An `archive` intent: a sealed segment about to be sent to `url` as object `key`."""

    bytes: int
    url: str
    key: str


_UPLOAD_SPAN = _SPAN + ("url", "key")


@dataclass(frozen=True, kw_only=True)
class ArchivedEntry(_Span):
    """The `archived` outcome of an upload: what the manifest lists (`seconds`: how long it took)."""

    url: Any
    key: Any
    time: float = stamp()
    bytes: int
    sha256: str
    index_bytes: int
    index_sha256: str
    seconds: Any = OMIT

    @classmethod
    def of(cls, planned: object, at: float, listed: Any, **extra: Any) -> ArchivedEntry:
        """The outcome of the upload of `planned` (an `UploadEntry`, or an intent read back) as
        `listed` (a manifest's segment) describes it."""
        return cls(**_pick(planned, _UPLOAD_SPAN, None), time=at, bytes=listed.bytes, sha256=listed.sha256,
                   index_bytes=listed.index_bytes, index_sha256=listed.index_sha256, **extra)


_COPY_EVICTION = _SPAN + ("bytes", "triggers", "because", "archived", "copy", "archive", "covered_by")


@dataclass(frozen=True, kw_only=True)
class CopyEvictionEntry(_TimedSpan):
    """An `evict-copy` intent (a cluster log's cached copy of an archived object, `segment` its key)
    and its `deleted` outcome."""

    bytes: Any
    triggers: Any
    because: Any
    archived: Any
    copy: Any
    archive: Any
    covered_by: Any = OMIT

    @classmethod
    def of(cls, intent: Mapping, at: float) -> CopyEvictionEntry:
        """The intent read back, at `at` (a dead process's eviction, settled)."""
        return cls(time=at, **_pick(intent, _COPY_EVICTION, OMIT))


_ARCHIVE_DELETION = _SPAN + ("bytes", "archive", "because")


@dataclass(frozen=True, kw_only=True)
class ArchiveDeletionEntry(_TimedSpan):
    """An `archive-delete` intent (an object of an archive tier at `path`, its URL) and its
    `deleted` outcome."""

    bytes: int
    archive: str
    because: str


@dataclass(frozen=True, kw_only=True)
class RecoveredArchiveDeletionEntry(_Span):
    """The `deleted` outcome of a dead process's `archive-delete` intent: its keys, then the time."""

    bytes: Any
    archive: Any
    because: Any
    time: float = stamp()

    @classmethod
    def of(cls, intent: Mapping, at: float, missing: Any = OMIT) -> RecoveredArchiveDeletionEntry:
        """`missing` stands for a key the intent lacks (`OMIT`: left out)."""
        return cls(**_pick(intent, _ARCHIVE_DELETION, missing), time=at)


@dataclass(frozen=True, kw_only=True)
class DamagedEntry:
    """A `damaged` line: an entry of a log's damage record (`commitlog.damage`), `found` when the
    writer's open found it, its other keys (`facts`) as the record holds them."""

    EVENT: ClassVar[Event] = Event.DAMAGED
    time: float = stamp()
    log: str
    path: str
    found: Any
    facts: Mapping = field(default_factory=dict, metadata={"flat": True})


@dataclass(frozen=True, kw_only=True)
class ClockSteppedEntry:
    """The wall clock (`time`) is `step_seconds` ahead of the trusted time, found `detected`."""

    EVENT: ClassVar[Event] = Event.CLOCK_STEPPED
    time: float = stamp()
    trusted_time: float = stamp()
    step_seconds: float
    detected: str
    threshold_seconds: float


@dataclass(frozen=True, kw_only=True)
class ClockAcceptedEntry:
    """The operator accepted a stepped clock: the hold lifts."""

    EVENT: ClassVar[Event] = Event.CLOCK_ACCEPTED
    time: float = stamp()
    trusted_time: float = stamp()
    step_seconds: float


@dataclass(frozen=True, kw_only=True)
class ClockReturnedEntry(ClockAcceptedEntry):
    """A stepped clock came back to the trusted time: the hold lifts."""

    EVENT: ClassVar[Event] = Event.CLOCK_RETURNED


@dataclass(frozen=True, kw_only=True)
class ClockSetBackEntry:
    """The wall clock (`time`) is `step_seconds` behind `expected_time`; nothing is held."""

    EVENT: ClassVar[Event] = Event.CLOCK_SET_BACK
    time: float = stamp()
    expected_time: float = stamp()
    step_seconds: float
    detected: str
