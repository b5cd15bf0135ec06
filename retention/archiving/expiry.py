"""Total retention on the archive tier: the segments `policies.archive_expiry` lets go are deleted
from the tier, audited as deletions are.

Each segment gets an `archive-delete` intent (fsynced) first; then the manifest is rewritten
without them (from that moment no reader is sent to them), then their objects are deleted and
each intent gets its `deleted` outcome (with `archive` naming the tier and `because` the total
retention that let it go). A process killed after the manifest's rewrite leaves objects the
manifest no longer lists: the next run settles the intent by deleting them (`recovered`); one
killed before leaves the segment listed, and the intent is `aborted` (`not-removed`).

Called by one log's uploader (`retention.archiving.uploader`); not thread-safe per log.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from loguru import logger

from commitlog import CommitLog
from commitlog.archive import LogArchive, Manifest
from commitlog.layout import segment_name
from policies import ArchivedSegmentSnapshot, PolicyConfig, expire_archived, plural

from ..audit import (AbortedEntry, AbortReason, ArchiveDeletionEntry, AuditTrail, Event, IntentAction,
                     RecoveredArchiveDeletionEntry)
from ..deletion.watched import group_snapshots

__all__ = ["ARCHIVE_DELETE", "archived_snapshots", "expire", "settle_deletes"]

ARCHIVE_DELETE = IntentAction.ARCHIVE_DELETE   # the audit intent's action


def archived_snapshots(manifest: Manifest) -> list[ArchivedSegmentSnapshot]:
    """The manifest's segments as total retention judges them (a segment's time: its last record's,
    else its upload's)."""
    return [ArchivedSegmentSnapshot(s.base_offset, s.end_offset, s.bytes,
                                    (s.last_timestamp_ms or s.archived_at_ms) / 1000) for s in manifest.segments]


def expire(archive: LogArchive, manifest: Manifest, log: CommitLog, policy: PolicyConfig, audit: AuditTrail,
           *, now: float, clock: Callable[[], float]) -> Manifest:
    """Delete what total retention lets go from `archive`; returns the manifest after it."""
    if policy.archive.reserve is None and policy.archive.retention_bytes is None:
        return manifest
    snapshots = archived_snapshots(manifest)
    expiry = expire_archived(snapshots, local_start=log.start_offset, groups=group_snapshots(log),
                             policy=policy, now=now)
    if not expiry.expired:
        return manifest
    intents = []
    for segment, why in expiry.expired:
        planned = ArchiveDeletionEntry(time=clock(), log=archive.name, path=_object_path(archive, segment.base_offset),
                                       segment=segment_name(segment.base_offset), base_offset=segment.base_offset,
                                       end_offset=segment.end_offset, bytes=segment.bytes, archive=archive.tier.url,
                                       because=why)
        intents.append((audit.intent(IntentAction.ARCHIVE_DELETE, planned), planned))
    manifest = manifest.without_before(expiry.expired[-1][0].end_offset)
    archive.write_manifest(manifest)
    for ident, planned in intents:
        _delete_objects(archive, planned.base_offset)
        audit.outcome_or_log(ident, Event.DELETED, replace(planned, time=clock()))
    logger.info("{}: total retention deleted {} from {} ({}); the archive starts at {}",
                archive.name, plural(len(intents), "archived segment"), archive.tier.url, intents[0][1].because,
                manifest.start_offset)
    return manifest


def settle_deletes(archive: LogArchive, manifest: Manifest, audit: AuditTrail, clock: Callable[[], float]) -> None:
    """Finish the archive deletions of this log whose process died (see the module docstring)."""
    for intent in audit.unresolved():
        if intent.get("action") != IntentAction.ARCHIVE_DELETE or intent.get("path") != _object_path(
                archive, intent.get("base_offset", -1)) or not isinstance(intent.get("end_offset"), int):
            continue
        if manifest.start_offset >= intent["end_offset"]:
            _delete_objects(archive, intent["base_offset"])
            audit.outcome_or_log(intent["id"], Event.DELETED, RecoveredArchiveDeletionEntry.of(intent, clock()),
                                 recovered=True)
            outcome = Event.DELETED
        else:
            audit.outcome_or_log(intent["id"], Event.ABORTED, AbortedEntry.of(intent, clock(), AbortReason.NOT_REMOVED),
                                 recovered=True)
            outcome = AbortReason.NOT_REMOVED
        logger.warning("{}: settled the audit intent of an interrupted archive deletion of {} (pid {}): {}",
                       archive.name, intent.get("segment"), intent.get("pid"), outcome)


def _object_path(archive: LogArchive, base_offset: int) -> str:
    """The audit's `path` of an archived segment: its object's URL (unique across logs and tiers)."""
    return f"{archive.tier.url.rstrip('/')}/{archive.key(segment_name(base_offset))}"


def _delete_objects(archive: LogArchive, base_offset: int) -> None:
    archive.drop_objects(base_offset)

