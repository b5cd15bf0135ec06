"""Choosing what a compaction pass rewrites: from a log's segments, a plan of output files with reasons.

:func:`plan_compaction` turns each sealed segment's record and live bytes, the policy's
``compaction`` settings, the segment size, the free bytes and the time into a
:class:`CompactionPlan`: output files, each replacing a run of consecutive segments, in the order
to write them (lowest live ratio first, zero-byte outputs first of all), and the reasons every
other segment is left alone (``active``, ``young``, ``archived``, ``disabled``, ``no-room``, ...).
Invariants: never the last segment; the outputs together fit beside one spare segment
(``sum(write_bytes) + segment_size <= free_bytes``). :func:`throttle_delay` and
:func:`within_pass_budget` pace an executor; :func:`should_compact_under_pressure` says when a
pressure pass must be followed by a compaction. The rules, and why each (candidates, merging,
room, throttle): docs, Concepts, "Choosing what a compaction rewrites".

Everything here is pure and its results immutable, so it is thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType

from policies.config import CompactionConfig, DiskConfig
from policies.reasons import ACTIVE
from policies.triggers import require_aware

__all__ = [
    "CompactionReason",
    "ARCHIVED_SEGMENT",
    "COMPACTION_REASONS",
    "DISABLED",
    "LIVE_RATIO",
    "NO_ROOM",
    "YOUNG",
    "CompactionPlan",
    "CompactionSegment",
    "PlannedOutput",
    "plan_compaction",
    "pressure_calls_for_compaction",
    "rewrite_share",
    "should_compact_under_pressure",
    "too_live_to_compact",
    "throttle_delay",
    "within_pass_budget",
]

class CompactionReason(StrEnum):
    """Why a compaction pass leaves a segment alone (besides `active`, the reasons' own)."""

    DISABLED = "disabled"
    YOUNG = "young"
    LIVE_RATIO = "live-ratio"
    NO_ROOM = "no-room"
    ARCHIVED = "archived"


DISABLED, YOUNG, LIVE_RATIO = CompactionReason.DISABLED, CompactionReason.YOUNG, CompactionReason.LIVE_RATIO
NO_ROOM, ARCHIVED_SEGMENT = CompactionReason.NO_ROOM, CompactionReason.ARCHIVED

COMPACTION_REASONS = MappingProxyType(
    {
        DISABLED: "compaction is off for this policy (compaction.enabled: false)",
        ACTIVE: "it is the segment being written",
        YOUNG: "its last record is younger than compaction.min_age",
        LIVE_RATIO: "its live share is not below compaction.max_live_ratio",
        NO_ROOM: "the disk lacks room for the rewritten file plus one segment",
        ARCHIVED_SEGMENT: "the log's archive tier holds it, and archived segments are not rewritten",
    }
)
"""Why a pass leaves a segment alone: every code with its one-line explanation (``retention plan``)."""


def rewrite_share(live_bytes: int, used_bytes: int) -> float:
    """The share of the bytes read that a rewrite writes back, ``live_bytes / used_bytes``: 0.0
    when nothing is read (a segment without records costs nothing to drop). Compaction ranks
    segments and outputs by it, lowest first, and bounds it by ``max_live_ratio``."""
    return live_bytes / used_bytes if used_bytes else 0.0


def too_live_to_compact(config: CompactionConfig, live_bytes: int, used_bytes: int) -> bool:
    """The ``live-ratio`` rule: a segment whose rewrite share is at or above ``max_live_ratio``
    is left alone. The executor passes it to the store too, which then describes only the
    segments a plan could take (``CommitLog.segments_with_dead``)."""
    return rewrite_share(live_bytes, used_bytes) >= config.max_live_ratio


def pressure_calls_for_compaction(*, config: CompactionConfig, disk: DiskConfig, used_ratio: float,
                                  deletion_can_free: bool) -> bool:
    """The disk's half of :func:`should_compact_under_pressure`, before any segment is looked at:
    compaction is enabled, deletion cannot free space and the disk is above ``force_ratio``."""
    return config.enabled and not deletion_can_free and used_ratio > disk.force_ratio


@dataclass(frozen=True, slots=True)
class CompactionSegment:
    """One segment of a log as compaction sees it. Immutable."""

    base_offset: int
    end_offset: int
    """Exclusive."""
    size_bytes: int
    """Bytes the file takes on disk, freed when it is replaced."""
    used_bytes: int
    """Bytes of records it holds, read by a rewrite."""
    live_bytes: int
    """Bytes of its records that are live (at most ``used_bytes``)."""
    first_timestamp_ms: int | None = None
    last_timestamp_ms: int | None = None
    """Timestamps of its first and last record; None when it holds none."""
    active: bool = False
    archived: bool = False
    """The log's archive tier holds it whole: never rewritten."""

    def __post_init__(self) -> None:
        if self.end_offset < self.base_offset:
            raise ValueError(f"segment {self.base_offset}: end_offset {self.end_offset} is below base_offset")
        if not 0 <= self.live_bytes <= self.used_bytes <= self.size_bytes:
            raise ValueError(
                f"segment {self.base_offset}: expected 0 <= live_bytes <= used_bytes <= size_bytes, got "
                f"{self.live_bytes}, {self.used_bytes}, {self.size_bytes}"
            )

    @property
    def live_ratio(self) -> float:
        return rewrite_share(self.live_bytes, self.used_bytes)


@dataclass(frozen=True, slots=True)
class PlannedOutput:
    """One file a compaction plan says to write, replacing a run of consecutive segments (what
    was written is the store's `commitlog.RewrittenRun`). Immutable."""

    inputs: tuple[int, ...]
    """Base offsets of the segments it replaces, consecutive in the log, oldest first."""
    end_offset: int
    """Exclusive end of the last input; the output covers ``[inputs[0], end_offset)``."""
    read_bytes: int
    write_bytes: int
    """Live bytes it will hold; 0 when the inputs just disappear."""
    freed_bytes: int
    """Bytes the inputs take on disk."""

    @property
    def base_offset(self) -> int:
        return self.inputs[0]

    @property
    def reclaimed_bytes(self) -> int:
        """Bytes of disk the output gives back once its inputs are gone."""
        return self.freed_bytes - self.write_bytes

    @property
    def live_ratio(self) -> float:
        return rewrite_share(self.write_bytes, self.read_bytes)


@dataclass(frozen=True)
class CompactionPlan:
    """The outputs of one pass over one log, in execution order, and why the rest stays. Immutable."""

    outputs: tuple[PlannedOutput, ...]
    kept: Mapping[int, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}), hash=False)
    """Base offset -> reason codes (:data:`COMPACTION_REASONS`), for every segment in no planned output."""

    @property
    def read_bytes(self) -> int:
        return sum(output.read_bytes for output in self.outputs)

    @property
    def write_bytes(self) -> int:
        return sum(output.write_bytes for output in self.outputs)

    @property
    def reclaimed_bytes(self) -> int:
        return sum(output.reclaimed_bytes for output in self.outputs)

    def reasons(self, base_offset: int) -> tuple[str, ...]:
        """The codes that leave the segment at ``base_offset`` alone; () when an output takes it."""
        return self.kept.get(base_offset, ())


def _reasons(segment: CompactionSegment, last: bool, config: CompactionConfig, now_ms: float) -> list[str]:
    """Every reason the segment cannot be an input, whatever the disk; [] for a candidate."""
    reasons = [] if config.enabled else [DISABLED]
    if segment.active or last:
        reasons.append(ACTIVE)
    if segment.archived:
        reasons.append(ARCHIVED_SEGMENT)
    if (
        config.min_age > 0
        and segment.last_timestamp_ms is not None
        and now_ms - segment.last_timestamp_ms < config.min_age * 1000
    ):
        reasons.append(YOUNG)
    if too_live_to_compact(config, segment.live_bytes, segment.used_bytes):
        reasons.append(LIVE_RATIO)
    return reasons


def _checked(segments: Sequence[CompactionSegment]) -> tuple[CompactionSegment, ...]:
    segments = tuple(segments)
    bases = [segment.base_offset for segment in segments]
    if any(later <= earlier for earlier, later in zip(bases, bases[1:])):
        raise ValueError(f"segments must be ordered by base_offset without repeats, got {bases}")
    if any(segment.active for segment in segments[:-1]):
        raise ValueError("only the last segment may be active")
    return segments


def _candidate_reasons(
    segments: tuple[CompactionSegment, ...], config: CompactionConfig, now: datetime
) -> list[list[str]]:
    now_ms = require_aware(now).timestamp() * 1000
    last = len(segments) - 1
    return [_reasons(segment, index == last, config, now_ms) for index, segment in enumerate(segments)]


def plan_compaction(
    segments: Sequence[CompactionSegment],
    *,
    config: CompactionConfig,
    segment_size: int,
    free_bytes: int,
    now: datetime,
) -> CompactionPlan:
    """Plan one compaction pass over a log's ``segments`` (all of them, oldest first, the active one last).

    ``free_bytes`` is what the filesystem holding the log has available; ``now`` an aware datetime.
    See the module docstring for the rules.
    """
    if segment_size <= 0:
        raise ValueError(f"segment_size must be positive, got {segment_size}")
    segments = _checked(segments)
    reasons = _candidate_reasons(segments, config, now)
    room = free_bytes - segment_size
    runs, no_room = _runs(segments, [not found for found in reasons], config.merge, segment_size, room)
    for index in no_room:
        reasons[index].append(NO_ROOM)
    outputs = sorted((_output(segments, run) for run in runs), key=lambda output: (output.live_ratio, output.base_offset))
    kept = {segment.base_offset: tuple(found) for segment, found in zip(segments, reasons) if found}
    return CompactionPlan(outputs=tuple(outputs), kept=MappingProxyType(kept))


def _empty_runs(segments: tuple[CompactionSegment, ...], indexes: Iterable[int], merge: bool) -> list[range]:
    """The fully dead segments among ``indexes`` (ascending) as runs of their own, consecutive ones together when merging."""
    runs: list[range] = []
    for index in indexes:
        if segments[index].live_bytes:
            continue
        if merge and runs and runs[-1].stop == index:
            runs[-1] = range(runs[-1].start, index + 1)
        else:
            runs.append(range(index, index + 1))
    return runs


def _output(segments: tuple[CompactionSegment, ...], run: range) -> PlannedOutput:
    inputs = [segments[index] for index in run]
    return PlannedOutput(
        inputs=tuple(segment.base_offset for segment in inputs),
        end_offset=inputs[-1].end_offset,
        read_bytes=sum(segment.used_bytes for segment in inputs),
        write_bytes=sum(segment.live_bytes for segment in inputs),
        freed_bytes=sum(segment.size_bytes for segment in inputs),
    )


def _runs(
    segments: tuple[CompactionSegment, ...], candidate: list[bool], merge: bool, segment_size: int, room: int
) -> tuple[list[range], list[int]]:
    """Group candidates into runs of consecutive indexes, one per output (the merging and room rules).

    Returns the runs and the indexes of the candidates left out for want of ``room`` (free bytes less
    one segment), which shrinks by each run's live bytes as the runs are formed.
    """
    empty = [found and segment.live_bytes == 0 for found, segment in zip(candidate, segments)]
    taken = [False] * len(segments)
    seeds = sorted(
        (index for index, found in enumerate(candidate) if found and not empty[index]),
        key=lambda index: (segments[index].live_ratio, segments[index].base_offset),
    )
    runs, no_room = [], []
    for seed in seeds:
        if taken[seed]:
            continue
        low, high, live = seed, seed, segments[seed].live_bytes
        if live > room:
            no_room.append(seed)  # room only shrinks, so no later run could take it either
            taken[seed] = True
            continue
        limit = min(segment_size, room)
        while merge:
            # Each side offers the next live candidate, reached over the fully dead ones between.
            options = []
            for step, edge in ((-1, low), (1, high)):
                index = edge + step
                while 0 <= index < len(segments) and empty[index] and not taken[index]:
                    index += step
                if 0 <= index < len(segments) and candidate[index] and not empty[index] and not taken[index]:
                    if live + segments[index].live_bytes <= limit:
                        options.append((segments[index].live_ratio, step, index))
            if not options:
                break
            _, step, index = min(options)
            low, high = min(low, index), max(high, index)
            live += segments[index].live_bytes
        runs.append(range(low, high + 1))
        for index in range(low, high + 1):
            taken[index] = True
        room -= live
    # Fully dead candidates no output bridged: zero-byte outputs, consecutive ones together when merging.
    runs.extend(_empty_runs(segments, [index for index, found in enumerate(empty) if found and not taken[index]], merge))
    return runs, no_room


def should_compact_under_pressure(
    segments: Sequence[CompactionSegment],
    *,
    config: CompactionConfig,
    disk: DiskConfig,
    used_ratio: float,
    deletion_can_free: bool,
    now: datetime,
) -> bool:
    """True when a pressure pass must be followed right away by a compaction pass of this log.

    Deletion goes first under pressure: while it can still free space (``deletion_can_free``: the
    deletion plan of the pressure pass deletes something), this is False. When it cannot, because
    every segment left is protected (unconsumed without force, held, active), and ``used_ratio``
    (measured after that pass) is still above ``force_ratio``, compaction is what frees space: True
    when compaction is enabled and some segment is a candidate (see the module docstring). Whether
    ``disk.force`` is on does not matter: compaction drops only dead records, never data anyone needs.
    BookKeeper suspends compaction exactly when the disk is full (BOOKKEEPER-1040); this does not.
    """
    if not pressure_calls_for_compaction(config=config, disk=disk, used_ratio=used_ratio,
                                         deletion_can_free=deletion_can_free):
        return False
    segments = _checked(segments)
    return any(not found for found in _candidate_reasons(segments, config, now))


def throttle_delay(bytes_moved: int, elapsed: float, max_bytes_per_second: int) -> float:
    """Seconds to wait, having read plus written ``bytes_moved`` in ``elapsed`` seconds, to keep the rate.

    0.0 when the pass is at or below ``max_bytes_per_second``; otherwise the time that brings
    ``bytes_moved / (elapsed + wait)`` down to the rate exactly.
    """
    if bytes_moved < 0 or elapsed < 0 or max_bytes_per_second <= 0:
        raise ValueError(
            f"expected bytes_moved >= 0, elapsed >= 0 and max_bytes_per_second > 0, got {bytes_moved}, "
            f"{elapsed}, {max_bytes_per_second}"
        )
    return max(0.0, bytes_moved / max_bytes_per_second - elapsed)


def within_pass_budget(elapsed: float, config: CompactionConfig) -> bool:
    """True while a pass that has run ``elapsed`` seconds may start another output (the budget ends at
    ``max_pass_duration``; an output already started is finished, so a pass ends between two outputs)."""
    return elapsed < config.max_pass_duration
