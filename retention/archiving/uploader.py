"""One log's uploads to its archive tier: every sealed segment, once sealed for `upload_after`,
goes to the tier (data and index, each verified) and into the log's manifest there, oldest first;
then the archive's total retention runs (`retention.archiving.expiry`).

Audited as deletions are: an `archive` intent (fsynced) before a segment is sent, then its
outcome, `archived` once the manifest lists it or `aborted` (`error`) when the tier refused it. A
process killed between the two leaves an intent the next run settles from the manifest:
`archived` (recovered) when it lists the segment, else `aborted` (`not-archived`) and the segment
is sent again, so uploads resume after a crash with nothing lost or listed twice.

A failing tier is tried again after `retry_after`, doubled after each failure in a row up to
`max_retry_after`; meanwhile the upload lag (the seconds the oldest due segment has waited, the
bytes waiting) keeps being measured from the local listing, so a tier that is down is reported
early. The uploader takes the log's retention ownership (`retention.deletion.owner`): a log
another process owns is left to it.

Not thread-safe: one run at a time (its scheduler job is `max_instances=1`); `state` may be read
from any thread (a frozen value replaced whole).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import NamedTuple

from loguru import logger

from commitlog import (ArchiveError, ArchiveMissingError, CommitLog, CommitLogError, CorruptLogError, SegmentInfo,
                       is_log_directory)
from commitlog.archive import ArchivedSegment, LogArchive, Manifest, Throttle, Tier
from commitlog.archive.upload import ManifestWriter, due, upload_due
from commitlog.layout import segment_name
from policies import LogConfig, PolicyConfig

from ..audit import OMIT, AbortedEntry, AbortReason, ArchivedEntry, AuditTrail, Event, IntentAction, UploadEntry
from ..deletion import owner
from .expiry import expire, settle_deletes

__all__ = ["LogUploader", "UploadState", "checked_segments"]

ARCHIVE = IntentAction.ARCHIVE   # the audit intent's action
CHECKED_PER_RUN = 8          # listed segments of each kind whose objects a run asks the tier for


def checked_segments(listed, local_start: int, cursor: int) -> list:
    """The listed segments a run checks on the tier: the oldest `CHECKED_PER_RUN` still held
    locally (eviction's next ones), and `CHECKED_PER_RUN` more from `cursor` on, round the rest."""
    local = [s for s in listed if s.end_offset > local_start][:CHECKED_PER_RUN]
    rest = [s for s in listed if s not in local]
    if len(rest) > CHECKED_PER_RUN:
        start = cursor % len(rest)
        rest = (rest[start:] + rest[:start])[:CHECKED_PER_RUN]
    return local + rest


class _Sent(NamedTuple):
    """A segment sent under intent `ident`, waiting for a manifest rewrite to list it (the tag
    `ManifestWriter` hands back)."""

    ident: str
    planned: UploadEntry
    segment: ArchivedSegment
    seconds: float
    info: SegmentInfo


@dataclass(frozen=True)
class UploadState:
    """What one log's uploads look like now (the figures /status and the metrics show)."""

    lag_seconds: float = 0.0
    """How long the oldest segment due for upload (sealed, past upload_after) has waited; 0: none waits."""
    lag_bytes: int = 0
    """Bytes of the segments due for upload and not archived."""
    archived_segments: int = 0
    archived_bytes: int = 0
    """Segments (and their bytes) the manifest lists, as last read."""
    failures: int = 0
    """Failed runs in a row (0 after a good one)."""
    last_error: str | None = None
    next_try_at: float = 0.0
    """Epoch seconds before which a failing tier is not tried again."""
    last_success_at: float | None = None
    owned_elsewhere: str | None = None
    oldest_due_at: float | None = None
    """Epoch seconds since which the oldest segment due for upload has waited (None: none waits),
    measured before each run touches the tier and after each segment is listed, so `lag_at`
    grows while a run hangs."""
    missing: str | None = None
    """Why the tier is not trusted (`commitlog.archive.identity`: gone, another tier, or listed
    objects it lacks); None when it is."""

    def lag_at(self, now: float) -> float:
        """The upload lag at `now`: the seconds the oldest due segment has waited."""
        return max(0.0, now - self.oldest_due_at) if self.oldest_due_at is not None else 0.0


class LogUploader:
    """The uploads of one log (see the module docstring)."""

    def __init__(self, name: str, log: LogConfig, policy: PolicyConfig, tier: Tier, audit: AuditTrail, *,
                 clock: Callable[[], float] = time.time, stopping: threading.Event | None = None,
                 sleep: Callable[[float], None] = time.sleep, expiry_clock: Callable[[], float] | None = None,
                 on_listed: Callable[[], None] = lambda: None) -> None:
        self.name = name
        self.path = str(log.path)
        self.policy = policy
        self.settings = policy.archive
        self.archive = LogArchive(tier, self.path)      # under the directory's name (docs/archive.md)
        self.audit = audit
        self._clock, self._sleep = clock, sleep
        self._expiry_clock = expiry_clock or clock    # total retention judges age at it (ClockGuard.judged)
        self._stopping = stopping or threading.Event()
        self._on_listed = on_listed                # after the manifest lists more (a force evicts them)
        self._log: CommitLog | None = None
        self._claim: str | None = None
        self._manifest: Manifest | None = None     # as last read from (or written to) the tier
        self._cursor = 0                           # where the rotating check of listed objects goes on
        self.state = UploadState()

    # ------------------------------------------------------------------ the job
    def run(self) -> list[SegmentInfo]:
        """Upload what is due (unless a failure's backoff runs); returns the segments archived."""
        now = self._clock()
        if not is_log_directory(self.path):
            self.state = UploadState()
            return []
        if not self._owned():
            return []
        self._measure(self._listing(), now)      # before the tier is asked: a hung tier shows as lag
        if now < self.state.next_try_at:
            return []
        done: list[SegmentInfo] = []
        try:
            self._manifest = manifest = self.archive.confirm()
            self._settle(manifest)
            settle_deletes(self.archive, manifest, self.audit, self._clock)
            doubtful = self._check_objects(manifest)
            writer = ManifestWriter(self.archive, manifest)

            def listed(tags: list) -> None:    # the manifest on the tier lists them now: the lag moves on
                done.extend(self._listed(tags))
                self._manifest = writer.manifest
                self._measure(self._listing(), self._clock())
                self._on_listed()
            try:
                # A listed segment whose objects the tier lacks, still held here, is sent again.
                upload_due(writer, due(self._listing(), manifest.without(doubtful), now_ms=int(now * 1000),
                                       upload_after_s=self.settings.upload_after),
                           self._upload, listed=listed, stop=self._stopping.is_set, flush=self._flush)
            finally:
                self._manifest = writer.manifest
            if not self._stopping.is_set():
                self._manifest = expire(self.archive, self._manifest, self._log, self.policy, self.audit,
                                        now=self._expiry_clock(), clock=self._clock)
        except (ArchiveError, CommitLogError, OSError) as exc:
            self._failed(exc)
        else:
            self.archive.note(down=None)
            self.state = replace(self.state, failures=0, last_error=None, next_try_at=0.0,
                                 last_success_at=self._clock())
        self._measure(self._listing(), self._clock())
        return done

    def _check_objects(self, manifest: Manifest) -> tuple[int, ...]:
        """Ask the tier for the objects of a bounded number of listed segments (`checked_segments`:
        the still-local ones eviction would take next, then a rotating share of the rest); the
        ones found missing or of another size are remembered (eviction passes them over, the
        health problem archive-missing names them) and returned. A tier found without any of them
        proves itself again (`LogArchive.confirm`): the proof at the run's start holds for the
        segments whose objects were found, not for a tier that went while it was checked (an S3
        server restarted empty). ArchiveMissingError, remembered, when it cannot: if it cannot
        be asked either, it is remembered as missing all the same (eviction stops). A check cut
        short by the tier's failure remembers what it found before failing."""
        local_start = self._log.start_offset if self._log is not None else 0
        chosen = checked_segments(manifest.segments, local_start, self._cursor)
        self._cursor += CHECKED_PER_RUN
        bad: dict[int, list[str]] = {}
        checked: set[int] = set()
        try:
            for segment in chosen:
                if problems := self.archive.absent(segment):
                    bad[segment.base_offset] = problems
                checked.add(segment.base_offset)
        except (ArchiveError, OSError):
            if bad:         # found missing before the tier failed: remembered all the same
                self._found_missing(manifest, checked, bad)
            raise
        return self._found_missing(manifest, checked, bad)

    def _found_missing(self, manifest: Manifest, checked: set[int], bad: dict[int, list[str]]) -> tuple[int, ...]:
        """Remember the segments of `bad` (objects missing) and forget those `checked` and found
        whole; when any is missing, the tier proves itself again (`_prove_again`)."""
        known = self.archive.state().unconfirmed
        keep = sorted({b for b in known if b not in checked and manifest.find(b) is not None} | set(bad))
        self.archive.note(unconfirmed=tuple(keep))
        if bad:
            logger.error("{}: the archive {} lacks objects it lists: {}", self.name, self.archive.tier.url,
                         "; ".join(p for ps in bad.values() for p in ps))
            self._prove_again()
        return tuple(keep)

    def _prove_again(self) -> None:
        """`confirm` once more after listed objects were found missing; a tier that cannot be
        asked now is remembered as missing (the proof at the run's start trusts it no more)."""
        try:
            self.archive.confirm()
        except ArchiveMissingError:
            raise
        except (ArchiveError, OSError) as exc:
            reason = exc.reason if isinstance(exc, ArchiveError) else str(exc)
            self.archive.note(missing=f"it lacks objects it lists and could not be asked again: {reason}")
            raise

    def look(self) -> None:
        """Read the manifest on the tier and measure the lag, uploading nothing (`archive status`)."""
        self._manifest = self.archive.manifest()
        self._measure(self._listing(), self._clock())

    def _upload(self, info: SegmentInfo, writer: ManifestWriter, *, again: bool = False) -> list:
        """Send one segment's objects under an audit intent and add it to `writer`; returns what
        the writer listed meanwhile (`_listed` audits them). ArchiveError (after its `aborted`
        outcome) when the tier refused it. A segment a compaction's swap replaced since the
        listing is sent once more, as it is now; one gone from the log is passed."""
        planned = UploadEntry(time=self._clock(), log=self.name, path=info.path, segment=os.path.basename(info.path),
                              base_offset=info.base_offset, end_offset=info.end_offset, bytes=info.used_bytes,
                              url=self.archive.tier.url, key=self.archive.key(segment_name(info.base_offset)))
        ident = self.audit.intent(IntentAction.ARCHIVE, planned)
        started = time.monotonic()
        throttle = Throttle(self.settings.max_bytes_per_second, sleep=self._sleep)
        try:
            segment = self.archive.put_segment(info, int(self._clock() * 1000), throttle.pace)
        except FileNotFoundError:
            self._abort(ident, planned, AbortReason.NOT_ARCHIVED)
            return []
        except CorruptLogError as exc:
            now = self._fresh(info)
            if again or now is None or (now.used_bytes, now.end_offset) == (info.used_bytes, info.end_offset):
                self._abort(ident, planned, AbortReason.ERROR, str(exc))
                raise
            self._abort(ident, planned, AbortReason.NOT_ARCHIVED, "replaced since it was listed (a compaction)")
            return self._upload(now, writer, again=True)
        except (ArchiveError, CommitLogError, OSError) as exc:
            self._abort(ident, planned, AbortReason.ERROR, str(exc))
            raise
        return writer.add(segment, _Sent(ident, planned, segment, time.monotonic() - started, info))

    def _flush(self, writer: ManifestWriter) -> list:
        """The manifest's last rewrite of a run; the segments it could not list are aborted."""
        try:
            return writer.flush()
        except (ArchiveError, OSError) as exc:
            for sent in writer.unlisted:
                self._abort(sent.ident, sent.planned, AbortReason.ERROR, f"the manifest could not be rewritten: {exc}")
            raise

    def _listed(self, listed: list[_Sent]) -> list[SegmentInfo]:
        """Audit the segments a manifest rewrite listed; returns them."""
        for sent in listed:
            self.audit.outcome_or_log(sent.ident, Event.ARCHIVED, ArchivedEntry.of(
                sent.planned, self._clock(), sent.segment, seconds=round(sent.seconds, 3)))
            logger.info("{}: archived {} ({} bytes, {:.2f}s) to {}", self.name, sent.planned.segment,
                        sent.segment.bytes, sent.seconds, self.archive.tier.url)
        return [sent.info for sent in listed]

    def _abort(self, ident: str, planned: UploadEntry, reason: AbortReason, error: str | None = None) -> None:
        entry = AbortedEntry.of(planned, self._clock(), reason, error=OMIT if error is None else error)
        self.audit.outcome_or_log(ident, Event.ABORTED, entry)

    def _fresh(self, info: SegmentInfo) -> SegmentInfo | None:
        try:
            return self._log.segment_info(info.base_offset)
        except (FileNotFoundError, CommitLogError):
            return None

    def _failed(self, exc: Exception) -> None:
        self.archive.note(down=str(exc))
        failures = self.state.failures + 1
        wait = min(self.settings.retry_after * 2 ** (failures - 1), self.settings.max_retry_after)
        level = "WARNING" if failures == 1 else "DEBUG"     # one line when a tier fails, not one a try
        logger.log(level, "{}: upload to {} failed ({} in a row), next try in {:g}s: {}", self.name,
                   self.archive.tier.url, failures, wait, exc)
        self.state = replace(self.state, failures=failures, last_error=str(exc), next_try_at=self._clock() + wait)

    # ------------------------------------------------------------------ figures
    def _listing(self) -> list[SegmentInfo]:
        if self._log is None:
            self._log = CommitLog.open(self.path, readonly=True)
        return self._log.segments()

    def _measure(self, segments: list[SegmentInfo], now: float) -> None:
        manifest = self._manifest or self.archive.cached_manifest() or Manifest(self.archive.name)
        waiting = due(segments, manifest, now_ms=int(now * 1000), upload_after_s=self.settings.upload_after)
        since = waiting[0].mtime + self.settings.upload_after if waiting else None
        kept = self.archive.state()
        missing = f"{kept.missing}; uploads, and evictions of what it lists, wait" if kept.missing else \
            (f"listed segments at offsets {list(kept.unconfirmed)} lack their objects on the tier (deleted "
             f"there?): not evicted, sent again while on disk" if kept.unconfirmed else None)
        self.state = replace(self.state, lag_seconds=max(0.0, now - since) if since is not None else 0.0,
                             oldest_due_at=since, lag_bytes=sum(s.used_bytes for s in waiting),
                             archived_segments=len(manifest.segments),
                             archived_bytes=sum(s.bytes for s in manifest.segments), missing=missing)

    # ------------------------------------------------------------------ crash recovery, ownership
    def _settle(self, manifest: Manifest) -> None:
        """Write the outcome of this log's upload intents whose process died."""
        mine = os.path.abspath(self.path)
        for intent in self.audit.unresolved():
            if intent.get("action") != IntentAction.ARCHIVE or os.path.dirname(str(intent.get("path"))) != mine:
                continue
            base, end = intent.get("base_offset"), intent.get("end_offset")
            if not isinstance(base, int) or not isinstance(end, int):
                continue
            if manifest.covers(base, end):
                self.audit.outcome_or_log(intent["id"], Event.ARCHIVED,
                                          ArchivedEntry.of(intent, self._clock(), manifest.find(base)), recovered=True)
                outcome = Event.ARCHIVED
            else:
                self.audit.outcome_or_log(intent["id"], Event.ABORTED,
                                          AbortedEntry.of(intent, self._clock(), AbortReason.NOT_ARCHIVED),
                                          recovered=True)
                outcome = AbortReason.NOT_ARCHIVED
            logger.warning("{}: settled the audit intent of an interrupted upload of {} (pid {}): {}",
                           self.name, intent.get("segment"), intent.get("pid"), outcome)

    def _owned(self) -> bool:
        if self._claim is None:
            try:
                self._claim = owner.claim(self.path) or ""
            except owner.OwnedElsewhere as exc:
                self.state = replace(UploadState(), owned_elsewhere=str(exc))
                return False
        return True

    def close(self) -> None:
        if self._claim:
            owner.release(self._claim)
        self._claim = None
        if self._log is not None:
            self._log.close()
            self._log = None
