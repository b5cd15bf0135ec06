"""The archive URL is checked once (storesettings.archive_url): the configuration, the store's tier
and the Spark data source's `archive` option accept the same URLs and refuse the same ones for the
same reason, each in its own frame; a URL carrying credentials is never echoed back."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from commitlog.archive import open_tier
from commitlog.errors import InvalidArgumentError
from commitlog.spark.source_options import Options
from commitlog.spark.staging_errors import OptionError
from policies.config.archive import ArchiveConfig
from storesettings.archive_url import ArchiveURLError, parse_archive_url

BAD = [
    ("ftp://host/x", "the scheme must be s3:// or file://, got 'ftp://host/x'"),
    ("file://relative/dir", "a file URL names an absolute directory"),
    ("s3:///prefix", "an s3 URL names a bucket"),
    ("s3://", "an s3 URL names a bucket"),
    ("file:///mnt/a?x=1", "must have no query or fragment"),
    ("s3://bucket/p#frag", "must have no query or fragment"),
    ("s3://key:secret@bucket/p", "credentials never go in the configuration"),
]


def _refusals(url: str) -> list[str]:
    said = []
    for check, error in ((lambda: ArchiveConfig(url=url), ValidationError),
                         (lambda: open_tier(url), InvalidArgumentError),
                         (lambda: Options.parse({"path": "/tmp/log", "archive": url}), OptionError)):
        with pytest.raises(error) as caught:
            check()
        exc = caught.value     # the configuration's line is built from pydantic's message
        said.append(exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc))
    return said


@pytest.mark.parametrize("url, reason", BAD)
def test_every_reader_of_an_archive_url_refuses_a_bad_one_for_the_same_reason(url, reason):
    with pytest.raises(ArchiveURLError) as caught:
        parse_archive_url(url)
    assert reason in str(caught.value)
    for message in _refusals(url):
        assert reason in message, message
        assert "secret" not in message


@pytest.mark.parametrize("url, scheme, location, prefix", [
    ("s3://bucket/some/prefix/", "s3", "bucket", "some/prefix"),
    ("s3://bucket", "s3", "bucket", ""),
    ("file:///mnt/archive", "file", "/mnt/archive", ""),
    ("file://localhost/mnt/archive", "file", "/mnt/archive", ""),
])
def test_every_reader_accepts_a_good_archive_url(url, scheme, location, prefix, tmp_path):
    parsed = parse_archive_url(url)
    assert (parsed.url, parsed.scheme, parsed.location, parsed.prefix) == (url, scheme, location, prefix)
    assert ArchiveConfig(url=url).url == url
    assert Options.parse({"path": str(tmp_path), "archive": url}).archive == url
    if scheme == "s3":                      # a directory tier would create its directory
        assert open_tier(url, endpoint="http://127.0.0.1:9", region="us-east-1").url == url
