"""The archive tier: sealed segments kept in object storage (S3 API) or a directory beyond the
local disk, listed by a per-log manifest that is the truth for readers.

    open_tier(url, endpoint=, region=)   a Tier: file:///dir or s3://bucket/prefix; Tier.create(key,
                                         data) writes only where no object is (one creator wins)
    LogArchive(tier, log_dir)            one log's objects and manifest on a tier
    cached_manifest(log_dir, name)       the manifest as this host last saw it (no tier asked)
    upload_sealed(archive, segments, now_ms=, ...)   the upload pass; Throttle caps its bytes/s
    identity.trusted_manifest(...)       what eviction may take as archived (the tier proved itself lately)
    CommitLog.open(path, archive=URL)    reads across both tiers (commitlog.archive.tiered)
    open_archive(url, name)              a log read from its archive alone (an ArchivedLog)
    versions                             a cluster log's versioned manifests (newest, create_version)
    groups                               a cluster log's consumer group commits (commit, committed)
    local_copies                         a host's copies of a cluster log's objects (its cache)

Errors: commitlog.errors.ArchiveError, ArchiveCorruptError, ArchiveMissingError.
"""

from .log_archive import LogArchive, cached_manifest
from .manifest import ArchivedSegment, Manifest
from .remote import ArchiveReader
from .tiered import ArchivedLog, open_archive
from .tier_url import open_tier
from .tiers import ObjectInfo, Tier
from .upload import Throttle, upload_sealed
from . import groups, local_copies, versions

__all__ = ["ArchiveReader", "ArchivedLog", "ArchivedSegment", "LogArchive", "cached_manifest",
           "open_archive", "Manifest", "ObjectInfo", "Throttle", "Tier",
           "groups", "local_copies", "open_tier", "upload_sealed", "versions"]
