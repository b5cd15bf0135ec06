"""Fixtures of the archive tests (tests/commitlog/test_archive_*.py): credentials for the S3
client, moto's S3 server on loopback (one per test module), and a tier of each kind."""

from __future__ import annotations

import pytest

from commitlog.archive import open_tier

from archive_helpers import BUCKET, CREDENTIALS, S3Server


@pytest.fixture
def s3_credentials(monkeypatch):
    """The environment boto3's credential chain reads, as the server expects it."""
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)


@pytest.fixture(scope="module")
def s3():
    server = S3Server().start()
    server.make_bucket()
    yield server
    server.kill()


@pytest.fixture(params=["file", "s3"])
def tier(request, tmp_path, s3_credentials):
    """A directory tier, or an S3 tier whose prefix is the test's own name."""
    if request.param == "file":
        return open_tier(f"file://{tmp_path}/archive/prefix")
    server = request.getfixturevalue("s3")
    return open_tier(f"s3://{BUCKET}/{request.node.name}", endpoint=server.endpoint,
                     region="us-east-1")
