"""Archive tiers against real stores: a directory, and moto's S3 server on loopback (a separate
process, killed to take the tier down). Objects round-trip whole and by range, the tier's stored
checksum is compared with the store's, a wrong one is refused and stores nothing, and a tier that
is down fails naming its URL and the key."""

from __future__ import annotations

import hashlib
import io
import os
import re

import pytest

from commitlog import ArchiveCorruptError, ArchiveError, InvalidArgumentError
from commitlog.archive import open_tier

from archive_helpers import BUCKET, S3Server, TcpProxy


def _put(tier, key: str, data: bytes):
    return tier.put(key, io.BytesIO(data), len(data))


def test_objects_round_trip_whole_and_by_range_with_their_checksum(tier):
    data = bytes(range(256)) * 4096                       # 1 MiB, more than one chunk
    info = _put(tier, "log/00000000000000000000.log", data)
    assert info.sha256 == hashlib.sha256(data).hexdigest()
    assert tier.read("log/00000000000000000000.log") == data
    assert tier.read_range("log/00000000000000000000.log", 1000, 300) == data[1000:1300]
    found = tier.head("log/00000000000000000000.log")
    assert (found.size, found.sha256) == (len(data), info.sha256)
    _put(tier, "log/manifest.json", b"{}")
    _put(tier, "other/manifest.json", b"{}")
    assert sorted(tier.keys("log/")) == ["log/00000000000000000000.log", "log/manifest.json"]
    _put(tier, "log/manifest.json", b'{"replaced": 1}')    # replaced whole
    assert tier.read("log/manifest.json") == b'{"replaced": 1}'
    tier.delete("log/manifest.json")
    tier.delete("log/manifest.json")                      # deleting what is gone is no error
    assert tier.read("log/manifest.json") is None and tier.head("log/manifest.json") is None


class _Changing(io.BytesIO):
    """A file rewritten once read (a hostile local file): its first byte changes at the first
    seek back to the start, after the tier read it a first time."""

    changed = False

    def seek(self, offset: int, whence: int = 0) -> int:
        if not self.changed and self.tell() > 0:
            self.getbuffer()[0] ^= 0xFF
            self.changed = True
        return super().seek(offset, whence)


def test_a_file_changed_while_uploaded_is_refused_or_stored_as_read(tier):
    data = b"the bytes of a segment" * 1000
    if tier.url.startswith("s3://"):
        # Hashed on the first read, sent on the second: the digest the server reports differs.
        with pytest.raises(ArchiveError, match=re.escape(f"{tier.url} object log/x.log")) as failure:
            tier.put("log/x.log", _Changing(data), len(data))
        assert "stored other bytes than sent" in str(failure.value)
        assert tier.head("log/x.log") is None
    else:
        # Read once, hashed as written and read back: what is stored is what was hashed.
        info = tier.put("log/x.log", _Changing(data), len(data))
        assert info.sha256 == hashlib.sha256(tier.read("log/x.log")).hexdigest()
    assert [k for k in tier.keys("log/") if k != "log/x.log"] == []   # no temporary listed


def test_a_source_shorter_than_said_stores_nothing(tier):
    with pytest.raises(ArchiveError, match="ended 10 bytes early"):
        tier.put("log/short.log", io.BytesIO(b"12345"), 15)
    assert tier.head("log/short.log") is None and list(tier.keys("log/")) == []


def test_a_tier_that_is_down_fails_naming_the_url_and_key(s3_credentials):
    server = S3Server().start()
    server.make_bucket()
    tier = open_tier(f"s3://{BUCKET}/p", endpoint=server.endpoint, region="us-east-1")
    _put(tier, "log/a.log", b"a")
    server.kill()
    with pytest.raises(ArchiveError, match=rf"archive s3://{BUCKET}/p object log/b.log: "):
        _put(tier, "log/b.log", b"b")
    with pytest.raises(ArchiveError, match="object log/a.log"):
        tier.read_range("log/a.log", 0, 1)
    # No answer at all is a failure, never taken for a missing object.
    with pytest.raises(ArchiveError, match="object log/a.log"):
        tier.read("log/a.log")
    with pytest.raises(ArchiveError, match="object log/a.log"):
        tier.head("log/a.log")


def test_a_directory_tier_that_cannot_be_written_fails_naming_it(tmp_path):
    (tmp_path / "archive").write_bytes(b"a file where the tier's directory should be")
    tier = open_tier(f"file://{tmp_path}/archive")
    with pytest.raises(ArchiveError, match=rf"archive file://{tmp_path}/archive object log/a.log"):
        _put(tier, "log/a.log", b"a")
    with pytest.raises(ArchiveError, match="object log/a.log"):
        tier.read_range("log/a.log", 0, 1)
    # No answer at all is a failure, never taken for a missing object.
    with pytest.raises(ArchiveError, match="object log/a.log"):
        tier.read("log/a.log")
    with pytest.raises(ArchiveError, match="object log/a.log"):
        tier.head("log/a.log")


@pytest.mark.parametrize("url, message", [
    ("ftp://host/dir", "the scheme must be s3:// or file://"),
    ("file://relative/dir", "a file URL names an absolute directory"),
    ("s3:///prefix", "an s3 URL names a bucket"),
])
def test_bad_urls_are_refused_naming_them(url, message):
    with pytest.raises(InvalidArgumentError, match=message):
        open_tier(url)


def test_corrupt_error_is_an_archive_error():
    assert issubclass(ArchiveCorruptError, ArchiveError)


def test_a_put_cut_mid_object_stores_nothing_and_succeeds_once_the_network_is_back(s3, s3_credentials):
    proxy = TcpProxy(s3.port)
    try:
        tier = open_tier(f"s3://{BUCKET}/cut", endpoint=proxy.endpoint, region="us-east-1")
        data = os.urandom(3 << 20)
        proxy.cut_after(1 << 20)                  # a third of the body reaches the server
        with pytest.raises(ArchiveError, match=rf"archive s3://{BUCKET}/cut object log/a.log: "):
            _put(tier, "log/a.log", data)
        proxy.up()
        assert tier.head("log/a.log") is None    # nothing half-stored under the key
        _put(tier, "log/a.log", data)
        assert tier.read("log/a.log") == data
    finally:
        proxy.close()


def test_a_file_source_is_stored_from_where_it_stands_and_one_shorter_than_said_stores_nothing(tier, tmp_path):
    # A directory tier copies a file by the kernel and compares the copy with it: the bytes from
    # the file's position on are stored, never the bytes before it, and an end before `size` fails.
    source = tmp_path / "segment"
    data = os.urandom((9 << 20) + 5)                 # many parts of the read-back, the last short
    source.write_bytes(b"before" + data)
    with open(source, "rb") as f:
        f.seek(6)
        info = tier.put("log/file.log", f, len(data))
    assert tier.read("log/file.log") == data and info.sha256 == hashlib.sha256(data).hexdigest()
    with open(source, "rb") as f, pytest.raises(ArchiveError, match="ended 10 bytes early"):
        f.seek(16)
        tier.put("log/short.log", f, len(data))
    assert tier.head("log/short.log") is None and sorted(tier.keys("log/")) == ["log/file.log"]


def test_a_directory_tier_that_fills_up_mid_copy_fails_naming_the_key_and_leaves_nothing(small_fs, tmp_path):
    # The copy runs in a thread beside the read-back: its ENOSPC must reach the caller, not a hang
    # nor a read-back error, and neither the object nor its temporary name may be left.
    tier = open_tier(f"file://{small_fs}/archive")
    source = tmp_path / "segment"
    source.write_bytes(os.urandom(12 << 20))        # more than the 8 MiB filesystem
    with open(source, "rb") as f, pytest.raises(ArchiveError, match=r"object log/big.log: No space left"):
        tier.put("log/big.log", f, 12 << 20)
    assert list(tier.keys("log/")) == [] and os.listdir(f"{small_fs}/archive/log") == []
    with open(source, "rb") as f:                   # the tier is whole: a smaller object goes in
        info = tier.put("log/small.log", f, 1 << 20)
    assert info.sha256 == hashlib.sha256(source.read_bytes()[:1 << 20]).hexdigest()
