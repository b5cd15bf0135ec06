"""Helpers of the archive-read probes (tests/adversary/test_archive_reads_*.py): a tier of each
kind, logs archived to it, and the hostile edits made to the tier behind the reader's back."""

from __future__ import annotations

import io
import json
import random
import time

import pytest

from commitlog import CommitLog
from commitlog.archive import LogArchive, open_tier, upload_sealed
from commitlog.archive.log_archive import index_name
from commitlog.layout import segment_name

from archive_helpers import BUCKET

SEG = 64 << 10


@pytest.fixture(params=["file", "s3"])
def tier(request, tmp_path, s3_credentials):
    """A directory tier, or an S3 tier on moto's server whose prefix is the test's own."""
    if request.param == "file":
        return open_tier(f"file://{tmp_path}/archive/prefix")
    server = request.getfixturevalue("s3")
    return open_tier(f"s3://{BUCKET}/{request.node.name}", endpoint=server.endpoint, region="us-east-1")


def archived_log(tmp_path, tier, name: str, n: int = 300, *, seed: int = 7) -> list[tuple]:
    """A log `name` of `n` records (sizes fixed by n alone, values by `seed`) whose sealed
    segments are all archived to `tier`; returns its records."""
    sizes = random.Random(n)
    values = random.Random(seed)
    path = str(tmp_path / "logs" / name)
    with CommitLog.open(path, segment_size=SEG, flush="none") as log:
        for i in range(n):
            log.append(values.randbytes(sizes.randint(10, 2000)), timestamp_ms=1_700_000_000_000 + i)
        written = [tuple(r) for r in log.scan()]
        upload_sealed(LogArchive(tier, path), log.segments(), now_ms=int(time.time() * 1000))
    return written


def data_key(name: str, base: int) -> str:
    return f"{name}/{segment_name(base)}"


def index_key(name: str, base: int) -> str:
    return f"{name}/{index_name(base)}"


def put(tier, key: str, data: bytes) -> None:
    """Write `data` under `key` as someone with access to the tier would (not through a manifest)."""
    tier.put(key, io.BytesIO(data), len(data))


def edit_manifest(tier, name: str, edit) -> None:
    """Rewrite log `name`'s manifest on the tier as `edit(body)` leaves its parsed JSON."""
    key = f"{name}/manifest.json"
    body = json.loads(tier.read(key))
    edited = edit(body)
    put(tier, key, json.dumps(body if edited is None else edited).encode())
