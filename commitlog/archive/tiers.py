"""Archive tiers: where sealed segments are kept beyond the local disk, addressed by a URL
(`file:///mnt/archive/prefix`, a directory; `s3://bucket/prefix`, any S3 API through boto3, with
credentials only from boto3's standard chain, never from configuration).

Keys are relative to the URL's prefix. Every object stored is verified: a directory tier reads its
copy back and hashes it before renaming it into place; an S3 put sends MD5 and SHA-256 and
compares the digest the server reports. Objects are written and replaced whole, or created only
where no object is (`create`: one winner). Reads take byte ranges. Every failure is an
`ArchiveError` naming the URL and the key; a checksum that differs is an `ArchiveCorruptError`.
Thread-safe (boto3 clients are; the directory tier holds no state); process-safe as the store
underneath is. The tiers are `directory_tier.DirectoryTier` and `s3_tier.S3Tier`, opened by
`tier_url.open_tier`; this module holds what they share (the protocol, `ObjectInfo`, hashing while
copying). How each verifies and creates: docs/archive.md, "How an upload goes".
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import BinaryIO, Protocol

CHUNK = 1 << 20                      # bytes read, hashed and sent at a time
HASHING = ThreadPoolExecutor(2, thread_name_prefix="archive-hash")   # a digest beside the reader


@dataclass(frozen=True)
class ObjectInfo:
    """An object as the tier reports it: its size and the SHA-256 (hex) it stored."""

    key: str
    size: int
    sha256: str | None


class Tier(Protocol):
    url: str

    def put(self, key: str, source: BinaryIO, size: int) -> ObjectInfo:
        """Store `size` bytes of `source` (seekable, at its start) under `key`, verified; the
        returned SHA-256 is the stored bytes'."""

    def read_range(self, key: str, start: int, length: int) -> bytes: ...

    def read(self, key: str) -> bytes | None: ...

    def head(self, key: str) -> ObjectInfo | None: ...

    def size(self, key: str) -> int | None:
        """The object's size in bytes (None: no such object), without reading or hashing it."""

    def delete(self, key: str) -> None: ...

    def keys(self, prefix: str = "") -> Iterator[str]: ...

    def create(self, key: str, data: bytes) -> ObjectInfo | None:
        """Store `data` under `key` only if no object is there; None when one is (another writer
        created it first). Atomic against every other writer of the tier (create-exclusive), and
        verified as `put` is: the building block of state shared through the tier."""


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def copy_hashing(source: BinaryIO, size: int, write: Callable[[bytes], object], *digests) -> None:
    """Copy `size` bytes of `source` through `write`, updating `digests` with them: the first in
    another thread while this one updates the rest and writes (hashlib and file writes let go of
    the GIL), so hashing with MD5 and SHA-256 costs the slower of the two, not their sum."""
    left = size
    pending = None
    first, rest = (digests[0], digests[1:]) if digests else (None, ())
    try:
        while left:
            chunk = source.read(min(CHUNK, left))
            if not chunk:
                raise EOFError(f"the source ended {left} bytes early")
            if pending is not None:
                pending.result()
            if first is not None:
                pending = HASHING.submit(first.update, chunk)
            for digest in rest:
                digest.update(chunk)
            write(chunk)
            left -= len(chunk)
    finally:
        if pending is not None:
            pending.result()
