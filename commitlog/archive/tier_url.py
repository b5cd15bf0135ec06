"""Opening an archive tier by its URL: `file:///dir` (a `DirectoryTier`) or `s3://bucket/prefix`
(an `S3Tier`), anything else refused naming the URL (see `commitlog.archive.tiers`)."""

from __future__ import annotations

from urllib.parse import urlparse

from ..errors import InvalidArgumentError
from .directory_tier import DirectoryTier
from .s3_tier import S3Tier
from .tiers import Tier

__all__ = ["open_tier"]


def open_tier(url: str, *, endpoint: str | None = None, region: str | None = None) -> Tier:
    """The tier at `url` (file:// or s3://); InvalidArgumentError for any other."""
    parsed = urlparse(url)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost") or not parsed.path.startswith("/"):
            raise InvalidArgumentError(f"archive url {url!r}: a file URL names an absolute "
                                       f"path, as file:///mnt/archive")
        return DirectoryTier(url, parsed.path)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise InvalidArgumentError(f"archive url {url!r}: an s3 URL names a bucket, as "
                                       f"s3://bucket/prefix")
        return S3Tier(url, parsed.netloc, parsed.path.strip("/"), endpoint, region)
    raise InvalidArgumentError(f"archive url {url!r}: the scheme must be file:// or s3://")
