"""The archive tier: sealed segments kept in object storage (S3 API) or a directory beyond the
local disk, listed by a per-log manifest that is the truth for readers.

    open_tier(url, endpoint=, region=)   a Tier: file:///dir or s3://bucket/prefix
    LogArchive(tier, log_dir)            one log's objects and manifest on a tier
    upload_sealed(archive, segments, now_ms=, ...)   the upload pass; Throttle caps its bytes/s

Errors: commitlog.errors.ArchiveError, ArchiveCorruptError.
"""

from .log_archive import LogArchive
from .manifest import ArchivedSegment, Manifest
from .tiers import ObjectInfo, Tier, open_tier
from .upload import Throttle, upload_sealed

__all__ = ["ArchivedSegment", "LogArchive", "Manifest", "ObjectInfo", "Throttle", "Tier",
           "open_tier", "upload_sealed"]
