"""What checking archived objects against their manifest costs readers (docs/archive.md, "What
reads verify"): each data object's size and whole SHA-256 before its first record is served.

Measured against the same reader with the check switched off (its methods replaced by
pass-throughs: the reads as they were before the check existed), interleaved rounds, best of each:

1. A scan of the whole archived log through `open_archive`, from a directory tier and from S3
   (moto's server on loopback), MB/s of record values.
2. Single reads: one record from each of the log's objects, each by a fresh reader (the first read
   of an object checks it whole; without the check it fetches one 1 MiB range), ms per read.

Usage: python bench/bench_archive_check.py [MiB]   (default 256: the log's size; 16 MiB segments)
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from commitlog.archive import LogArchive, open_archive, open_tier, upload_sealed
from commitlog.archive.object_check import CheckedObjects
from commitlog.archive.remote import ArchiveReader

sys.path.append(str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parents[1] / "tests"))
from archive_helpers import BUCKET, CREDENTIALS, S3Server  # noqa: E402
from bench_archive import MiB, build  # noqa: E402

ROUNDS = 3
_CHECKED = (ArchiveReader._chain, ArchiveReader._check_ahead, CheckedObjects.check_range)


def checking(on: bool) -> None:
    if on:
        ArchiveReader._chain, ArchiveReader._check_ahead, CheckedObjects.check_range = _CHECKED
    else:
        ArchiveReader._chain = lambda self, key, segment, ahead=None: None
        ArchiveReader._check_ahead = lambda self, segment, ahead: None
        CheckedObjects.check_range = lambda self, key, chain, first, data, expected: data


def scan(url: str, endpoint: str | None) -> float:
    with open_archive(url, "log", endpoint=endpoint, region="us-east-1") as log:
        t = time.perf_counter()
        nbytes = sum(len(r.value) for r in log.scan())
        return nbytes / MiB / (time.perf_counter() - t)


def single_reads(url: str, endpoint: str | None) -> float:
    with open_archive(url, "log", endpoint=endpoint, region="us-east-1") as log:
        middles = [(s.base_offset + s.end_offset) // 2 for s in log.archive.manifest().segments]
    t = time.perf_counter()
    for offset in middles:
        with open_archive(url, "log", endpoint=endpoint, region="us-east-1") as log:
            log.read(offset)
    return (time.perf_counter() - t) * 1000 / len(middles)


def main() -> None:
    total = int(sys.argv[1]) * MiB if len(sys.argv) > 1 else 256 * MiB
    os.environ.update(CREDENTIALS)
    server = S3Server().start()
    server.make_bucket()
    tmp = tempfile.mkdtemp(prefix="bench-archive-check-")
    try:
        path = os.path.join(tmp, "log")
        sealed = build(path, total)
        tiers = {"file": (f"file://{tmp}/tier", None), "s3": (f"s3://{BUCKET}/tier", server.endpoint)}
        for url, endpoint in tiers.values():
            archive = LogArchive(open_tier(url, endpoint=endpoint, region="us-east-1"), path)
            archive.forget()        # the log archives to both: each meets it as a new tier
            upload_sealed(archive, sealed, now_ms=0)
        print(f"log: {len(sealed)} sealed segments, {sum(s.used_bytes for s in sealed) / MiB:.0f} MiB; "
              f"{ROUNDS} interleaved rounds, best of each; load average {os.getloadavg()[0]:.1f}")
        results: dict[tuple, list[float]] = {}
        for _ in range(ROUNDS):
            for tier, (url, endpoint) in tiers.items():
                for on in (False, True):
                    checking(on)
                    results.setdefault(("scan", tier, on), []).append(scan(url, endpoint))
                    results.setdefault(("read", tier, on), []).append(single_reads(url, endpoint))
        checking(True)
        for tier in tiers:
            off, on = max(results[("scan", tier, False)]), max(results[("scan", tier, True)])
            print(f"scan from {tier:4}: checked {on:7.1f} MB/s  unchecked {off:7.1f}  "
                  f"ratio {on / off:.2f} (no target)")
            off, on = min(results[("read", tier, False)]), min(results[("read", tier, True)])
            print(f"first read of an object from {tier:4}: checked {on:6.1f} ms  unchecked {off:6.1f} ms  "
                  f"ratio {on / off:.1f} (no target)")
    finally:
        server.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
