"""Archive tiers: where sealed segments are kept beyond the local disk, addressed by a URL.

- `file:///mnt/archive/prefix`: a directory (an NFS mount, a second disk). An object is written
  to a temporary name, synced, read back and hashed, then renamed into place: a reader never
  sees half an object, and what was stored is what was verified.
- `s3://bucket/prefix`: any S3 API (AWS, MinIO, Ceph RGW) through boto3, with `endpoint` and
  `region`; credentials come from boto3's standard chain (environment, profile, instance role),
  never from configuration. An object is hashed first (MD5 and SHA-256), then put with both (AWS
  refuses a body that does not match them; not every S3 API checks), and the digest the server
  reports for what it stored is compared: a single-part put's ETag (the MD5 of the bytes it
  received), or its SHA-256 where the ETag is no digest (encrypted objects). An object that does
  not match is deleted and the put fails.

Keys are relative to the URL's prefix. Objects are written whole and replaced whole (the one key
rewritten is a log's manifest). Reads take byte ranges. Every failure is an `ArchiveError`
naming the URL and the key; a checksum that differs is an `ArchiveCorruptError`.

Thread-safe (boto3 clients are; the directory tier holds no state); process-safe as the
underlying store is (last writer of a key wins).
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import BinaryIO, Protocol
from urllib.parse import urlparse

from ..errors import ArchiveCorruptError, ArchiveError, InvalidArgumentError
from ..layout import fsync_directory

CHUNK = 1 << 20                      # bytes read, hashed and sent at a time
_HASHING = ThreadPoolExecutor(2, thread_name_prefix="archive-hash")   # a digest beside the reader
_MD5 = re.compile(r"[0-9a-f]{32}")


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


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _copy(source: BinaryIO, size: int, write: Callable[[bytes], object], *digests) -> None:
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
                pending = _HASHING.submit(first.update, chunk)
            for digest in rest:
                digest.update(chunk)
            write(chunk)
            left -= len(chunk)
    finally:
        if pending is not None:
            pending.result()


class DirectoryTier:
    """A directory as a tier (see the module docstring)."""

    def __init__(self, url: str, root: str) -> None:
        self.url = url
        self.root = root

    def _path(self, key: str) -> str:
        parts = key.split("/")
        if any(p in ("", ".", "..") or "\0" in p for p in parts):    # never a path outside root
            raise ArchiveError(self.url, key, "not a key: an empty, '.' or '..' part, or a NUL")
        return os.path.join(self.root, *parts)

    def _fail(self, key: str | None, exc: Exception) -> ArchiveError:
        return ArchiveError(self.url, key, getattr(exc, "strerror", None) or str(exc))

    def put(self, key: str, source: BinaryIO, size: int) -> ObjectInfo:
        path = self._path(key)
        tmp = f"{path}.{uuid.uuid4().hex}.part"
        sent, back = hashlib.sha256(), hashlib.sha256()
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(tmp, "wb") as out:
                _copy(source, size, out.write, sent)
                out.flush()
                os.fsync(out.fileno())
            with open(tmp, "rb") as written:
                _copy(written, size, lambda _: None, back)
            if back.hexdigest() != sent.hexdigest():
                raise ArchiveCorruptError(self.url, key, f"read back with SHA-256 "
                                          f"{back.hexdigest()}, written {sent.hexdigest()}")
            os.replace(tmp, path)
            fsync_directory(os.path.dirname(path))
        except (OSError, EOFError) as exc:
            raise self._fail(key, exc) from exc
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return ObjectInfo(key, size, sent.hexdigest())

    def read_range(self, key: str, start: int, length: int) -> bytes:
        try:
            with open(self._path(key), "rb") as f:
                return os.pread(f.fileno(), length, start)
        except OSError as exc:
            raise self._fail(key, exc) from exc

    def read(self, key: str) -> bytes | None:
        try:
            with open(self._path(key), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._fail(key, exc) from exc

    def head(self, key: str) -> ObjectInfo | None:
        data = self.read(key)    # a directory stores no checksum: the object is hashed
        return None if data is None else ObjectInfo(key, len(data), sha256_hex(data))

    def size(self, key: str) -> int | None:
        try:
            return os.stat(self._path(key)).st_size
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._fail(key, exc) from exc

    def delete(self, key: str) -> None:
        try:
            os.unlink(self._path(key))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise self._fail(key, exc) from exc

    def keys(self, prefix: str = "") -> Iterator[str]:
        top = self._path(prefix.rstrip("/")) if prefix.rstrip("/") else self.root
        for folder, _, files in os.walk(top):
            rel = os.path.relpath(folder, self.root)
            for name in sorted(files):
                if not name.endswith(".part"):
                    yield name if rel == "." else f"{rel.replace(os.sep, '/')}/{name}"


class S3Tier:
    """An S3 bucket and prefix as a tier (see the module docstring)."""

    def __init__(self, url: str, bucket: str, prefix: str, endpoint: str | None,
                 region: str | None) -> None:
        import boto3       # the `archive` extra; only a tier in S3 needs it
        from botocore.config import Config

        self.url = url
        self.endpoint, self.region = endpoint, region
        self.bucket = bucket
        self.prefix = f"{prefix}/" if prefix else ""
        self._client = boto3.session.Session().client(
            "s3", endpoint_url=endpoint, region_name=region,
            config=Config(retries={"max_attempts": 3, "mode": "standard"},
                          connect_timeout=5, read_timeout=30,
                          # Every put carries Content-MD5 and its SHA-256, which the server checks:
                          # signing the body as well would hash it a third time (botocore skips it
                          # on https; this does so on http too).
                          s3={"payload_signing_enabled": False}))

    def _fail(self, key: str | None, exc: Exception) -> ArchiveError:
        return ArchiveError(self.url, key, f"{type(exc).__name__}: {exc}")

    def _errors(self):
        from botocore.exceptions import BotoCoreError, ClientError
        return BotoCoreError, ClientError

    def put(self, key: str, source: BinaryIO, size: int) -> ObjectInfo:
        md5, sha = hashlib.md5(usedforsecurity=False), hashlib.sha256()
        start = source.tell()
        try:
            _copy(source, size, lambda _: None, md5, sha)
        except EOFError as exc:
            raise self._fail(key, exc) from exc
        source.seek(start)
        try:
            answer = self._client.put_object(
                Bucket=self.bucket, Key=self.prefix + key, Body=_Exact(source, size),
                ContentLength=size, ContentMD5=base64.b64encode(md5.digest()).decode(),
                ChecksumAlgorithm="SHA256", ChecksumSHA256=base64.b64encode(sha.digest()).decode())
        except self._errors() as exc:
            raise self._fail(key, exc) from exc
        etag = answer.get("ETag", "").strip('"')
        stored_sha = answer.get("ChecksumSHA256")
        if _MD5.fullmatch(etag):      # a single-part put's ETag: the MD5 of what the server got
            verified = etag == md5.hexdigest()
        else:                         # encrypted objects' ETags are not digests
            verified = stored_sha is not None and base64.b64decode(stored_sha) == sha.digest()
        if not verified:
            self.delete(key)          # nothing unverified stays under a key
            raise ArchiveCorruptError(self.url, key, f"the server stored other bytes than sent "
                                      f"(its digest {etag or stored_sha!r}, sent MD5 "
                                      f"{md5.hexdigest()})")
        return ObjectInfo(key, size, sha.hexdigest())

    def read_range(self, key: str, start: int, length: int) -> bytes:
        try:
            answer = self._client.get_object(Bucket=self.bucket, Key=self.prefix + key,
                                             Range=f"bytes={start}-{start + length - 1}")
            return answer["Body"].read()
        except self._errors() as exc:
            raise self._fail(key, exc) from exc

    def read(self, key: str) -> bytes | None:
        try:
            return self._client.get_object(Bucket=self.bucket, Key=self.prefix + key)["Body"].read()
        except self._errors() as exc:
            if _missing(exc):
                return None
            raise self._fail(key, exc) from exc

    def head(self, key: str) -> ObjectInfo | None:
        try:
            answer = self._client.head_object(Bucket=self.bucket, Key=self.prefix + key,
                                              ChecksumMode="ENABLED")
        except self._errors() as exc:
            if _missing(exc):
                return None
            raise self._fail(key, exc) from exc
        stored = answer.get("ChecksumSHA256")
        return ObjectInfo(key, answer["ContentLength"],
                          None if stored is None else base64.b64decode(stored).hex())

    def size(self, key: str) -> int | None:
        try:
            return self._client.head_object(Bucket=self.bucket, Key=self.prefix + key)["ContentLength"]
        except self._errors() as exc:
            if _missing(exc):
                return None
            raise self._fail(key, exc) from exc

    def delete(self, key: str) -> None:
        try:
            self._client.delete_object(Bucket=self.bucket, Key=self.prefix + key)
        except self._errors() as exc:
            raise self._fail(key, exc) from exc

    def keys(self, prefix: str = "") -> Iterator[str]:
        try:
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix + prefix)
            for page in pages:
                for item in page.get("Contents", ()):
                    yield item["Key"][len(self.prefix):]
        except self._errors() as exc:
            raise self._fail(prefix or None, exc) from exc


def _missing(exc: Exception) -> bool:
    code = (getattr(exc, "response", None) or {}).get("Error", {}).get("Code")   # None: no answer at all
    return code in ("404", "NoSuchKey", "NotFound", "NoSuchBucket")   # a bucket gone holds no key


class _Exact:
    """`size` bytes of a file, as a body boto3 can send and resend (a retry seeks back)."""

    def __init__(self, source: BinaryIO, size: int) -> None:
        self._source = source
        self._start = source.tell()
        self._left = size
        self._size = size

    def read(self, n: int = -1) -> bytes:
        n = self._left if n is None or n < 0 else min(n, self._left)
        data = self._source.read(n)
        self._left -= len(data)
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence != 0:
            raise OSError("only absolute seeks")
        self._source.seek(self._start + offset)
        self._left = self._size - offset
        return offset

    def tell(self) -> int:
        return self._size - self._left
