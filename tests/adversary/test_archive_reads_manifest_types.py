"""Probe: a manifest with a field of the wrong type, out of range, missing, or not a JSON object at
all is an ArchiveCorruptError naming the field, on every read and on the local cached copy, never
a TypeError or another exception outside the error tree."""

from __future__ import annotations

import json

import pytest

from commitlog import ArchiveCorruptError
from commitlog.archive import Manifest, open_tier
from commitlog.archive.tiered import ArchivedLog, archive_reader

from archive_reads_helpers import archived_log, edit_manifest

HOSTILE = ["5", -1, 2 ** 64, 10 ** 400, None, True, 1.5, [], {}, "", "x" * 10_000]
TOP = ["format", "log", "start_offset", "segments"]
SEGMENT = ["base_offset", "end_offset", "bytes", "sha256", "index_bytes", "index_sha256",
           "last_timestamp_ms", "archived_at_ms"]
# Values a field may legitimately hold: not hostile for it.
ALLOWED = [("last_timestamp_ms", None), ("last_timestamp_ms", -1), ("log", "5"), ("segments", [])]


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> bytes:
    tmp = tmp_path_factory.mktemp("types")
    tier = open_tier(f"file://{tmp}/archive")
    archived_log(tmp, tier, "ours")
    return tier.read("ours/manifest.json")


def _refused(data: bytes, field: str) -> None:
    with pytest.raises(ArchiveCorruptError) as caught:
        Manifest.from_json(data, "file:///t", "ours/manifest.json")
    assert field in str(caught.value) and "\n" not in str(caught.value)
    assert len(str(caught.value)) < 400            # a hostile value is never printed whole


@pytest.mark.parametrize("field", TOP)
def test_a_top_level_field_of_a_wrong_type_or_range_or_missing_is_named(good, field):
    for value in HOSTILE:
        if (field, value) in ALLOWED:
            continue
        body = json.loads(good)
        body[field] = value
        _refused(json.dumps(body).encode(), field)
    body = json.loads(good)
    del body[field]
    _refused(json.dumps(body).encode(), field)


@pytest.mark.parametrize("field", SEGMENT)
def test_a_segment_field_of_a_wrong_type_or_range_or_missing_is_named(good, field):
    for value in HOSTILE:
        if (field, value) in ALLOWED:
            continue
        body = json.loads(good)
        body["segments"][1][field] = value
        _refused(json.dumps(body).encode(), f"segments[1].{field}")
    body = json.loads(good)
    del body["segments"][1][field]
    _refused(json.dumps(body).encode(), f"segments[1].{field}")


@pytest.mark.parametrize("data", [b"[]", b'"x"', b"3", b"null", b"{", b"\xff\xfe", b"[" * 100_000,
                                  b'{"format": 1, "log": "ours", "start_offset": 0, "segments": [7]}',
                                  b'{"format": 1, "log": "ours", "start_offset": 0, "segments": [{"x": 1}]}'])
def test_a_manifest_that_is_not_a_json_object_of_the_format_is_named(data):
    with pytest.raises(ArchiveCorruptError, match="not a manifest"):
        Manifest.from_json(data, "file:///t", "ours/manifest.json")


def test_a_string_base_offset_on_the_tier_fails_every_read_with_the_field_named(tmp_path):
    tier = open_tier(f"file://{tmp_path}/archive")
    archived_log(tmp_path, tier, "ours", n=120)
    edit_manifest(tier, "ours", lambda body: body["segments"][0].update(base_offset="0"))
    log = ArchivedLog(archive_reader(tier, None, "ours"))
    for read in (lambda: log.read(0), lambda: list(log.scan()), lambda: log.start_offset,
                 lambda: log.offset_for_time(0)):
        with pytest.raises(ArchiveCorruptError, match=r"ours/manifest.json: not a manifest: "
                                                      r"segments\[0\]\.base_offset: '0'"):
            read()


def test_a_segment_of_records_timed_before_1970_is_archived_and_read(tmp_path):
    from commitlog import CommitLog
    from commitlog.archive import LogArchive, upload_sealed
    tier = open_tier(f"file://{tmp_path}/archive")
    path = str(tmp_path / "old")
    with CommitLog.open(path, segment_size=64 << 10, flush="none") as log:
        for i in range(100):
            log.append(b"v" * 2000, timestamp_ms=-1_000_000 + i)
        upload_sealed(LogArchive(tier, path), log.segments(), now_ms=0)
        written = [tuple(r) for r in log.scan()]
    reader = ArchivedLog(archive_reader(tier, None, "old"))
    assert reader.archive.manifest().segments[0].last_timestamp_ms < 0
    assert [tuple(r) for r in reader.scan()] == written[:reader.end_offset]


def test_an_entry_s_host_is_optional_and_checked(good):
    """A cluster log's entry names the host that staged it; older manifests have no `host`."""
    body = json.loads(good)
    assert "host" not in body["segments"][1]
    body["segments"][1]["host"] = "127.0.0.2"
    parsed = Manifest.from_json(json.dumps(body).encode(), "file:///t", "ours/manifest.json")
    assert parsed.segments[1].host == "127.0.0.2" and parsed.segments[0].host is None
    assert json.loads(parsed.to_json())["segments"][1]["host"] == "127.0.0.2"
    assert "host" not in json.loads(parsed.to_json())["segments"][0]
    for value in (-1, 2 ** 64, True, 1.5, [], {}, "", "x" * 10_000, "a b", "a/b", "x\n"):
        body["segments"][1]["host"] = value
        _refused(json.dumps(body).encode(), "segments[1].host")
