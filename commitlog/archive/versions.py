"""A cluster log's shared state on its tier: versioned manifests, never rewritten in place.

Keys under the log's folder `<log>/`:
    cluster.json                  created (create-exclusive) by the first cluster write: the log's
                                  truth is its versioned manifests, not one host's upload
    manifests/<20-digit n>.json   manifest version n (commitlog.archive.manifest's format), each
                                  created with `Tier.create`: of two writers creating version n+1
                                  one wins, the other reads the new newest and tries again
    manifest.json                 a copy of the newest version for older readers, written after
                                  each commit (last writer wins: it may lag; readers of a cluster
                                  log take the newest version)

The newest version is the truth: found by listing `manifests/` (a directory listing; S3 LIST is
strongly consistent). Old versions are pruned best effort (the newest KEEP_VERSIONS stay); a
reader whose listed version was pruned meanwhile lists again. Thread- and process-safe: the
tier's create is the only coordination.
"""

from __future__ import annotations

import io
import json

from ..errors import ArchiveError
from .manifest import MANIFEST_KEY, Manifest
from .tiers import Tier

__all__ = ["CLUSTER_KEY", "KEEP_VERSIONS", "MANIFESTS", "create_version", "is_cluster", "mark_cluster",
           "newest", "numbered", "prune", "publish", "version_key", "versions"]

CLUSTER_KEY = "cluster.json"
MANIFESTS = "manifests"
KEEP_VERSIONS = 20
CLUSTER_FORMAT = 1
_RELISTS = 5                          # a listed version pruned before it was read: list again


def version_key(name: str, version: int) -> str:
    return f"{name}/{MANIFESTS}/{version:020d}.json"


def versions(tier: Tier, name: str) -> list[int]:
    """The manifest versions on the tier, oldest first (a key that is no version is passed over)."""
    return numbered(tier, f"{name}/{MANIFESTS}/")


def numbered(tier: Tier, prefix: str) -> list[int]:
    """The numbers of the `<20 digits>.json` objects right under `prefix`, lowest first (shared
    state kept as numbered objects, each created exclusively: versions, lease terms)."""
    found = []
    for key in tier.keys(prefix):
        stem = key[len(prefix):]
        if stem.endswith(".json") and len(stem) == 25 and stem[:20].isdigit():
            found.append(int(stem[:20]))
    return sorted(found)


def newest(tier: Tier, name: str) -> tuple[int, Manifest] | None:
    """The newest manifest version and its number; None when the log has none."""
    for _ in range(_RELISTS):
        listed = versions(tier, name)
        if not listed:
            return None
        key = version_key(name, listed[-1])
        data = tier.read(key)
        if data is not None:
            return listed[-1], Manifest.from_json(data, tier.url, key)
    raise ArchiveError(tier.url, f"{name}/{MANIFESTS}/", f"the newest manifest version vanished "
                       f"{_RELISTS} times while it was read (pruned faster than listed?)")


def create_version(tier: Tier, name: str, version: int, manifest: Manifest) -> bool:
    """Create manifest `version`; False when another writer created it first."""
    return tier.create(version_key(name, version), manifest.to_json()) is not None


def publish(tier: Tier, name: str, version: int, manifest: Manifest, keep: int = KEEP_VERSIONS) -> None:
    """After a commit, best effort: `manifest.json` = this version (for older readers), versions
    older than the newest `keep` deleted. An error is the caller's to log, never to fail on."""
    data = manifest.to_json()
    tier.put(f"{name}/{MANIFEST_KEY}", io.BytesIO(data), len(data))
    prune(tier, name, keep)


def prune(tier: Tier, name: str, keep: int = KEEP_VERSIONS) -> None:
    for version in versions(tier, name)[:-keep]:
        tier.delete(version_key(name, version))


def is_cluster(tier: Tier, name: str) -> bool:
    """Whether log `name` on the tier is a cluster log (its `cluster.json` exists)."""
    return tier.size(f"{name}/{CLUSTER_KEY}") is not None


def mark_cluster(tier: Tier, name: str, now_ms: int) -> bool:
    """Create `cluster.json` unless it exists; True when this call created it."""
    body = json.dumps({"format": CLUSTER_FORMAT, "created_at_ms": now_ms}).encode()
    return tier.create(f"{name}/{CLUSTER_KEY}", body) is not None
