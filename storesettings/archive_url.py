"""An archive tier's URL, parsed and checked in one place for every reader of one: the
configuration (`policies.config`), the store's tier (`commitlog.archive.open_tier`) and the Spark
data source's `archive` option. `s3://bucket/prefix` or `file:///absolute/dir`; no credentials,
query or fragment. Each caller puts its own frame (a key path, an argument, an option name) around
the one reason. Pure: thread- and process-safe.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlparse

__all__ = ["CREDENTIALS", "ArchiveURL", "ArchiveURLError", "parse_archive_url"]

CREDENTIALS = ("credentials never go in the configuration: give them to the standard chain "
               "(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile, an instance role)")


class ArchiveURLError(ValueError):
    """Not an archive URL; the message says why, naming the URL unless it carries credentials."""


@dataclass(frozen=True)
class ArchiveURL:
    """A checked archive URL: `url` as given, `scheme` "s3" or "file", `location` the bucket or
    the absolute directory, `prefix` the key prefix in the bucket (no slashes around; "" for a
    directory)."""

    url: str
    scheme: str
    location: str
    prefix: str


def parse_archive_url(value: object) -> ArchiveURL:
    """`value` as an ArchiveURL; ArchiveURLError for anything else."""
    if not isinstance(value, str):
        raise ArchiveURLError(f"expected a URL such as 's3://bucket/prefix' or 'file:///mnt/archive', got {value!r}")
    parsed = urlparse(value)
    if parsed.username is not None or parsed.password is not None:
        raise ArchiveURLError(CREDENTIALS)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ArchiveURLError(f"an s3 URL names a bucket, as s3://bucket/prefix, got {value!r}")
        found = ArchiveURL(value, "s3", parsed.netloc, parsed.path.strip("/"))
    elif parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost") or not parsed.path.startswith("/"):
            raise ArchiveURLError(f"a file URL names an absolute directory, as file:///mnt/archive, got {value!r}")
        found = ArchiveURL(value, "file", parsed.path, "")
    else:
        raise ArchiveURLError(f"the scheme must be s3:// or file://, got {value!r}")
    if parsed.query or parsed.fragment:
        raise ArchiveURLError(f"must have no query or fragment, got {value!r}")
    return found
