"""`S3Tier`: an S3 bucket and prefix as an archive tier (`s3://bucket/prefix`, any S3 API through
boto3; see `commitlog.archive.tiers`). A put is hashed first (MD5 and SHA-256) and sent with both;
the digest the server reports for what it stored is compared, and an object that does not match is
deleted. `create` is a put with `If-None-Match: *`: the server refuses it (412) when the key is
taken. Thread-safe (boto3 clients are); process-safe as the store is.
"""

from __future__ import annotations

import base64
import hashlib
import io
import re
import time
from collections.abc import Iterator
from typing import BinaryIO

from ..errors import ArchiveCorruptError, ArchiveError
from .tiers import ObjectInfo, copy_hashing

__all__ = ["S3Tier"]

_MD5 = re.compile(r"[0-9a-f]{32}")
_CONFLICT_RETRIES = 5        # a concurrent conditional write to the same key: AWS answers 409, retry


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
        return self._put(key, source, size)

    def _put(self, key: str, source: BinaryIO, size: int, **condition: str) -> ObjectInfo:
        md5, sha = hashlib.md5(usedforsecurity=False), hashlib.sha256()
        start = source.tell()
        try:
            copy_hashing(source, size, lambda _: None, md5, sha)
        except EOFError as exc:
            raise self._fail(key, exc) from exc
        source.seek(start)
        try:
            answer = self._client.put_object(
                Bucket=self.bucket, Key=self.prefix + key, Body=_Exact(source, size),
                ContentLength=size, ContentMD5=base64.b64encode(md5.digest()).decode(),
                ChecksumAlgorithm="SHA256", ChecksumSHA256=base64.b64encode(sha.digest()).decode(),
                **condition)
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

    def create(self, key: str, data: bytes) -> ObjectInfo | None:
        for attempt in range(_CONFLICT_RETRIES):
            try:
                return self._put(key, io.BytesIO(data), len(data), IfNoneMatch="*")
            except ArchiveError as exc:
                code = _code(exc.__cause__)
                if code == "PreconditionFailed":
                    return None                 # taken: another writer created it first
                if code != "ConditionalRequestConflict" or attempt == _CONFLICT_RETRIES - 1:
                    raise
                time.sleep(0.05 * (attempt + 1))
        return None


def _code(exc: BaseException | None) -> str | None:
    """The S3 error code of a botocore ClientError (None: no answer at all)."""
    return (getattr(exc, "response", None) or {}).get("Error", {}).get("Code")


def _missing(exc: Exception) -> bool:
    return _code(exc) in ("404", "NoSuchKey", "NotFound", "NoSuchBucket")   # a bucket gone holds no key


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
