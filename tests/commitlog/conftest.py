"""Fixtures of the archive tests (tests/commitlog/test_archive_*.py): a tier of each kind (the S3
server and its credentials are tests/conftest.py's)."""

from __future__ import annotations

import pytest

from commitlog.archive import open_tier

from archive_helpers import BUCKET


@pytest.fixture(params=["file", "s3"])
def tier(request, tmp_path, s3_credentials):
    """A directory tier, or an S3 tier whose prefix is the test's own name."""
    if request.param == "file":
        return open_tier(f"file://{tmp_path}/archive/prefix")
    server = request.getfixturevalue("s3")
    return open_tier(f"s3://{BUCKET}/{request.node.name}", endpoint=server.endpoint,
                     region="us-east-1")
