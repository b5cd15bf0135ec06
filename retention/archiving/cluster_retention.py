"""Total retention of a cluster log on its tier, by the lease owner (docs/spark-cluster.md,
"Retention on the tier"): the newest manifest version's head segments that the log's policy lets
go (`policies.archive_expiry`, as a single host's archive: by `archive.reserve` and
`archive.retention_bytes`, every live consumer group's unconsumed records kept, groups read from
the tier by `commitlog.archive.groups`) leave the manifest in one new version whose start offset
is past them. A commit that created the next version first wins: the newest is read again and
the decision made again. Their objects are deleted later by the collector
(`retention.archiving.staged_collector`), once no kept version lists them and the grace for
readers of older versions passed.

Not thread-safe per log: its tier job runs one at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

from loguru import logger

from commitlog.archive import ArchivedSegment, Manifest, Tier, groups, versions
from commitlog.errors import ArchiveError
from policies import GroupSnapshot, PolicyConfig, expire_archived, plural

from .expiry import archived_snapshots

__all__ = ["Dropped", "drop_expired"]

_TRIES = 20                           # versions lost to commits before this run gives up


@dataclass(frozen=True)
class Dropped:
    """What one run dropped from the manifest: the version it created and each segment with why."""

    version: int
    segments: tuple[tuple[ArchivedSegment, str], ...]


def drop_expired(tier: Tier, name: str, policy: PolicyConfig, *, now: float) -> Dropped | None:
    """Create the manifest version without the head segments total retention lets go at `now`;
    None when nothing goes (or the policy has no total retention). ArchiveError when the tier
    fails or commits won the next version `_TRIES` times in a row."""
    if policy.archive.reserve is None and policy.archive.retention_bytes is None:
        return None
    for _ in range(_TRIES):
        found = versions.newest(tier, name)
        if found is None:
            return None
        version, manifest = found
        expired = _expired(tier, name, manifest, policy, now)
        if not expired:
            return None
        following = manifest.without_before(expired[-1][0].end_offset)
        if versions.create_version(tier, name, version + 1, following):
            _publish(tier, name, version + 1, following)
            logger.info("{}: total retention on {} dropped {} ({}) in manifest version {}; the log "
                        "starts at {}", name, tier.url, plural(len(expired), "segment"), expired[0][1], version + 1,
                        following.start_offset)
            return Dropped(version + 1, tuple(expired))
    raise ArchiveError(tier.url, f"{name}/{versions.MANIFESTS}/", f"total retention lost the next manifest "
                       f"version to commits {_TRIES} times in a row: nothing dropped this run")


def _expired(tier: Tier, name: str, manifest: Manifest, policy: PolicyConfig,
             now: float) -> list[tuple[ArchivedSegment, str]]:
    committed = groups.committed(tier, name)
    snapshots = [GroupSnapshot(g.group, g.offset, g.committed_at_ms / 1000) for g in committed.values()]
    # The tier is the log: no local copy holds anything back (local_start past every segment).
    expiry = expire_archived(archived_snapshots(manifest), local_start=manifest.end_offset, groups=snapshots,
                             policy=policy, now=now)
    by_base = {s.base_offset: s for s in manifest.segments}
    return [(by_base[s.base_offset], why) for s, why in expiry.expired]


def _publish(tier: Tier, name: str, version: int, manifest: Manifest) -> None:
    try:
        versions.publish(tier, name, version, manifest)
    except ArchiveError as exc:
        logger.warning("{}: version {} created; manifest.json or pruning failed ({})", name, version, exc)
