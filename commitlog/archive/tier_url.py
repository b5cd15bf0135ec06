"""Opening an archive tier by its URL: `file:///dir` (a `DirectoryTier`) or `s3://bucket/prefix`
(an `S3Tier`), checked as the configuration checks it (`storesettings.archive_url`), anything
else refused naming the URL (see `commitlog.archive.tiers`)."""

from __future__ import annotations

from storesettings.archive_url import ArchiveURLError, parse_archive_url

from ..errors import InvalidArgumentError
from .directory_tier import DirectoryTier
from .s3_tier import S3Tier
from .tiers import Tier

__all__ = ["open_tier"]


def open_tier(url: str, *, endpoint: str | None = None, region: str | None = None) -> Tier:
    """The tier at `url` (file:// or s3://); InvalidArgumentError for any other."""
    try:
        parsed = parse_archive_url(url)
    except ArchiveURLError as exc:
        raise InvalidArgumentError(f"archive url: {exc}") from None
    if parsed.scheme == "file":
        return DirectoryTier(url, parsed.location)
    return S3Tier(url, parsed.location, parsed.prefix, endpoint, region)
