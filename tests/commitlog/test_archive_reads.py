"""Reading across tiers: `CommitLog.open(path, archive=...)` reads and scans below the local start
from the archive, a log is read from its archive alone (`open_archive`), by byte ranges through a
bounded cache, with the store's records and errors, on a directory tier and a real S3 API."""

from __future__ import annotations

import os
import random
import time

import pytest

from commitlog import ArchiveCorruptError, CommitLog, OffsetOutOfRangeError, OffsetRemovedError
from commitlog.archive import LogArchive, open_archive, open_tier, upload_sealed
from commitlog.archive.remote import SCAN_WINDOW
from commitlog.archive.tiered import ArchivedLog, archive_reader
from commitlog.layout import segment_name

SEG = 64 << 10


def _written(path: str, n: int, *, segment_size: int = SEG, max_len: int = 3000, seed: int = 7) -> list:
    """A log of `n` records of random sizes, keys on every third, rising timestamps; returns them."""
    rnd = random.Random(seed)
    with CommitLog.open(path, segment_size=segment_size, flush="none") as log:
        for i in range(n):
            log.append(rnd.randbytes(rnd.randint(0, max_len)), key=b"k%d" % i if i % 3 == 0 else None,
                       timestamp_ms=1_700_000_000_000 + i * 10)
        return [tuple(r) for r in log.scan()]


def _archive_and_evict(path: str, tier, *, archive: int, evict: int) -> LogArchive:
    """Upload the `archive` oldest sealed segments, then remove the `evict` oldest locally."""
    archived = LogArchive(tier, path)
    with CommitLog.open(path, readonly=True) as log:
        upload_sealed(archived, log.segments()[:archive], now_ms=int(time.time() * 1000))
        for _ in range(evict):
            log.remove_head()
    return archived


def test_a_tiered_log_reads_and_scans_what_was_written_across_both_tiers(tmp_path, tier):
    path = str(tmp_path / "log")
    written = _written(path, 400)
    _archive_and_evict(path, tier, archive=4, evict=3)
    with CommitLog.open(path, readonly=True, archive=tier) as log:
        local_start = log.segments()[0].base_offset
        assert local_start > 0 and log.start_offset == 0
        assert [tuple(r) for r in log.scan()] == written
        assert [tuple(r) for r in log.scan(5, local_start + 3)] == written[5:local_start + 3]
        for offset in (0, local_start - 1, local_start, len(written) - 1):
            assert tuple(log.read(offset)) == written[offset]
        assert log.offset_for_time(1_700_000_000_000 + 25) == 3        # in the archive
        assert log.offset_for_time(1_700_000_000_000 + 10 * local_start) == local_start


def test_an_offset_removed_from_both_tiers_names_the_first_offset_either_holds(tmp_path, tier):
    path = str(tmp_path / "log")
    _written(path, 400)
    archived = _archive_and_evict(path, tier, archive=3, evict=3)
    manifest = archived.manifest()
    second = manifest.segments[1].base_offset
    archived.write_manifest(manifest.without_before(second))     # the archive's total retention
    with CommitLog.open(path, readonly=True, archive=tier) as log:
        assert log.start_offset == second
        with pytest.raises(OffsetOutOfRangeError, match=f"removed by retention; the log now starts at offset {second}"):
            log.read(second - 1)
        with pytest.raises(OffsetOutOfRangeError, match=f"starts at offset {second}"):
            list(log.scan(0))
        with pytest.raises(OffsetOutOfRangeError, match="negative"):
            log.read(-1)


def test_a_log_is_read_from_its_archive_alone_with_no_local_directory(tmp_path, tier):
    path = str(tmp_path / "log")
    written = _written(path, 400)
    archived = _archive_and_evict(path, tier, archive=5, evict=0)
    end = archived.manifest().end_offset
    with open_archive(tier.url, "log", endpoint=getattr(tier, "endpoint", None), region="us-east-1") as log:
        assert (log.start_offset, log.end_offset) == (0, end)
        assert [tuple(r) for r in log.scan()] == written[:end]
        assert tuple(log.read(end - 1)) == written[end - 1]
        with pytest.raises(OffsetOutOfRangeError, match="not written yet"):
            log.read(end)


def test_reads_check_an_object_whole_once_then_fetch_ranges_and_the_cache_stays_within_its_bound(tmp_path):
    tier = open_tier(f"file://{tmp_path}/archive")
    path = str(tmp_path / "log")
    written = _written(path, 4000, segment_size=32 << 20, max_len=30_000)   # records cross window ends
    archived = _archive_and_evict(path, tier, archive=1, evict=0)
    windows = -(-archived.manifest().segments[0].bytes // SCAN_WINDOW)
    log = ArchivedLog(archive_reader(tier, path, cache_bytes=3 * SCAN_WINDOW))
    assert tuple(log.read(3)) == written[3]
    # The object checked whole against its SHA-256 (in windows, the cache keeping the last three),
    # then the first window's chunk fetched again, compared with the check's digests.
    assert log.archive.cache.fetches == windows + 1 and log.archive.cache.size <= 3 * SCAN_WINDOW
    fetched = log.archive.cache.fetches
    assert tuple(log.read(4)) == written[4] and log.archive.cache.fetches == fetched
    end = log.end_offset
    assert [tuple(r) for r in log.scan()] == written[:end]      # records crossing window ends included
    size = os.path.getsize(os.path.join(path, segment_name(0)))
    assert log.archive.cache.size <= 3 * SCAN_WINDOW < size
    assert tuple(log.read(end - 1)) == written[end - 1]
    fetched = log.archive.cache.fetches
    assert tuple(log.read(end - 1)) == written[end - 1] and log.archive.cache.fetches == fetched  # cached


def test_a_compacted_segment_reads_from_the_archive_with_its_gaps(tmp_path, tier):
    path = str(tmp_path / "log")
    _written(path, 400)
    with CommitLog.open(path) as log:
        first = log.segments()[0]
        log.mark_dead([o for o in range(0, first.end_offset) if o % 4])
        log.compact([[first.base_offset]], lambda offset, key, tombstone, marked: "dead" if marked else None)
        expected = [tuple(r) for r in log.scan()]
    _archive_and_evict(path, tier, archive=2, evict=2)
    with CommitLog.open(path, readonly=True, archive=tier) as log:
        assert [tuple(r) for r in log.scan()] == expected
        with pytest.raises(OffsetRemovedError, match="offset 1 .*; the next offset that still exists is 4"):
            log.read(1)


def test_a_record_marked_dead_after_it_was_archived_is_not_read_back_through_the_local_log(tmp_path, tier):
    path = str(tmp_path / "log")
    written = _written(path, 400)
    _archive_and_evict(path, tier, archive=2, evict=2)
    with CommitLog.open(path, readonly=True, archive=tier) as log:
        assert log.mark_dead([5, 6]) == 0      # below the local start: not the local store's to mark
    with CommitLog.open(path, readonly=True) as log:
        local_start = log.start_offset
        log.mark_dead([local_start + 1])
    with CommitLog.open(path, readonly=True, archive=tier) as log:
        assert [r.offset for r in log.scan(0, local_start + 3)] == [o for o in range(local_start + 3)
                                                                    if o != local_start + 1]
        assert tuple(log.read(5)) == written[5]


@pytest.mark.parametrize("damaged", ["data", "index"])
def test_a_damaged_object_is_refused_naming_it(tmp_path, damaged):
    root = tmp_path / "archive"
    tier = open_tier(f"file://{root}")
    path = str(tmp_path / "log")
    _written(path, 400)
    _archive_and_evict(path, tier, archive=2, evict=2)
    name = segment_name(0) if damaged == "data" else segment_name(0).replace(".log", ".index")
    victim = root / "log" / name
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    with CommitLog.open(path, readonly=True, archive=tier) as log:
        with pytest.raises(ArchiveCorruptError, match=f"object log/{name}: "):
            list(log.scan())


def test_marks_of_evicted_segments_are_kept_while_the_archive_holds_their_records(tmp_path):
    from commitlog.cleanup.marks_shrink import obsolete_entries
    tier = open_tier(f"file://{tmp_path}/archive")
    path = str(tmp_path / "log")
    _written(path, 400)
    with CommitLog.open(path, readonly=True) as log:
        log.mark_dead([2])
    archived = _archive_and_evict(path, tier, archive=2, evict=2)
    with CommitLog.open(path, readonly=True) as log:
        log._segs.marks.refresh()
        [entry] = log._segs.marks.entries()
        assert obsolete_entries(log._segs)(*entry) is False        # the archive still holds offset 2
        archived.write_manifest(archived.manifest().without_before(log.segments()[0].base_offset))
        assert obsolete_entries(log._segs)(*entry) is True         # gone from both tiers


def test_a_record_larger_than_a_scan_window_reads_back_whole(tmp_path):
    tier = open_tier(f"file://{tmp_path}/archive")
    path = str(tmp_path / "log")
    big = os.urandom(SCAN_WINDOW + (3 << 20))
    with CommitLog.open(path, segment_size=32 << 20, flush="none") as log:
        log.append(b"x" * (SCAN_WINDOW - 1000))       # the big record starts just before a window's end
        log.append(big)
        log.append(b"after")
        log.append(os.urandom(20 << 20))              # fills the segment: the first three are sealed
    _archive_and_evict(path, tier, archive=1, evict=0)
    with open_archive(tier.url, "log") as log:
        assert [len(r.value) for r in log.scan(0, 3)] == [SCAN_WINDOW - 1000, len(big), 5]
        assert log.read(1).value == big and log.read(2).value == b"after"


def test_a_handle_open_before_more_segments_were_archived_and_evicted_reads_them(tmp_path):
    tier = open_tier(f"file://{tmp_path}/archive")
    path = str(tmp_path / "log")
    written = _written(path, 400)
    _archive_and_evict(path, tier, archive=1, evict=1)
    with CommitLog.open(path, readonly=True, archive=tier) as log:
        assert [tuple(r) for r in log.scan()] == written           # the manifest is read now
        _archive_and_evict(path, tier, archive=4, evict=2)         # another process moves on
        assert [tuple(r) for r in log.scan()] == written           # ... and it is read again
        assert tuple(log.read(written[-1][0] - 1)) == written[-2]


def test_readers_in_threads_sharing_one_archive_reader_check_each_object_and_read_the_same_records(tmp_path, tier):
    from concurrent.futures import ThreadPoolExecutor
    path = str(tmp_path / "log")
    written = _written(path, 600)
    _archive_and_evict(path, tier, archive=6, evict=0)
    log = ArchivedLog(archive_reader(tier, path, cache_bytes=SEG))        # ranges are fetched again
    end = log.end_offset

    def scan(start: int) -> list:
        return [tuple(r) for r in log.scan(start)]

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(scan, [0, 0, end // 3, end // 2, 0, end - 1]))
    assert results == [written[s:end] for s in (0, 0, end // 3, end // 2, 0, end - 1)]
    assert all(log.archive.checked.chain(log.archive.archive.key(segment_name(s.base_offset)), s)
               for s in log.archive.manifest().segments)


def test_an_archive_with_nothing_for_the_log_opens_with_a_warning_once(tmp_path, caplog):
    """A mistyped archive URL reads as "nothing archived": the open says so, once per process."""
    path = str(tmp_path / "events")
    _written(path, 100, max_len=3000)               # more than one segment: one sealed to archive
    typo = f"file://{tmp_path}/archvie"
    os.mkdir(tmp_path / "archvie")
    with caplog.at_level("WARNING", logger="commitlog"):
        for _ in range(2):
            with CommitLog.open(path, readonly=True, archive=typo) as log:
                assert log.start_offset == 0
    said = [r.getMessage() for r in caplog.records if "holds nothing for log events" in r.getMessage()]
    assert len(said) == 1 and typo in said[0], caplog.text
    archive = f"file://{tmp_path}/archive"
    os.mkdir(tmp_path / "archive")
    _archive_and_evict(path, open_tier(archive), archive=1, evict=0)
    caplog.clear()
    with caplog.at_level("WARNING", logger="commitlog"):
        with CommitLog.open(path, readonly=True, archive=archive):
            pass
    assert "holds nothing" not in caplog.text
