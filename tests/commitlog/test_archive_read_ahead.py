"""A scan of archived segments fetches ranges ahead of itself in parallel, holds no more than its
stated bound while it does, and leaves nothing running once it stops, early or on an error: on a
real directory tier whose range reads are slowed by a real sleep (so fetches overlap)."""

from __future__ import annotations

import os
import threading
import time

import pytest

from commitlog import ArchiveCorruptError, CommitLog
from commitlog.archive import LogArchive, upload_sealed
from commitlog.archive.directory_tier import DirectoryTier
from commitlog.archive.read_ahead import RANGES_HELD
from commitlog.archive.remote import SCAN_WINDOW
from commitlog.archive.tiered import ArchivedLog, archive_reader

SEG = 16 << 20                   # two scan windows an object
VALUE = 64 << 10


class _SlowTier(DirectoryTier):
    """A directory tier whose range reads take `delay` seconds more, counting those under way."""

    def __init__(self, root: str, delay: float) -> None:
        super().__init__(f"file://{root}", root)
        self.delay = delay
        self._lock = threading.Lock()
        self.now = self.most = self.calls = 0

    def read_range(self, key: str, start: int, length: int) -> bytes:
        with self._lock:
            self.now += 1
            self.calls += 1
            self.most = max(self.most, self.now)
        try:
            time.sleep(self.delay)
            return super().read_range(key, start, length)
        finally:
            with self._lock:
                self.now -= 1


@pytest.fixture(scope="module")
def archived(tmp_path_factory):
    """A log of five sealed 16 MiB segments archived to a directory; its records."""
    root = tmp_path_factory.mktemp("read-ahead")
    path = str(root / "log")
    values = [os.urandom(VALUE) for _ in range(64)]
    with CommitLog.open(path, segment_size=SEG, flush="none") as log:
        while len(log.segments()) < 6:
            log.append_batch(values)
        sealed = [s for s in log.segments() if not s.active]
        end = sealed[-1].end_offset
        written = [tuple(r) for r in log.scan(0, end)]
    upload_sealed(LogArchive(DirectoryTier(f"file://{root}/archive", str(root / "archive")), path),
                  sealed, now_ms=0)
    return str(root / "archive"), path, written


def _reader(archived, delay: float) -> tuple[_SlowTier, ArchivedLog]:
    root, path, _ = archived
    tier = _SlowTier(root, delay)
    return tier, ArchivedLog(archive_reader(tier, path))


def test_a_scan_fetches_ranges_in_parallel_and_holds_no_more_than_its_bound(archived):
    tier, log = _reader(archived, 0.05)
    assert [tuple(r) for r in log.scan()] == archived[2]
    reader = log.archive
    # Ranges overlap (read-ahead), never more at once than the bound, whose bytes bound what the
    # read-ahead held; the cache stays within its own.
    assert 2 <= tier.most <= RANGES_HELD
    assert 0 < reader.read_ahead_peak <= RANGES_HELD * SCAN_WINDOW
    assert reader.cache.size <= reader.cache.limit
    # Each window fetched once: the checks' windows served the scan from the cache.
    windows = sum(-(-s.bytes // SCAN_WINDOW) for s in reader.manifest().segments)
    assert tier.calls == windows


def _quiet_after(tier: _SlowTier) -> None:
    """Nothing of the reader is under way now, and nothing starts afterwards."""
    assert tier.now == 0
    calls = tier.calls
    time.sleep(0.3)
    assert tier.calls == calls and tier.now == 0


def test_a_scan_stopped_early_cancels_its_read_ahead_and_leaves_no_thread(archived):
    tier, log = _reader(archived, 0.05)
    threads = threading.active_count()
    for _ in range(5):
        scan = log.scan()
        first = next(scan)
        assert tuple(first) == archived[2][0]
        scan.close()
        _quiet_after(tier)
        reader = log.archive
        assert not reader._checking and not reader._fetching
    # The pools are the process's, bounded: five scans stopped early left no threads behind.
    assert threading.active_count() <= threads + RANGES_HELD + 2
    # What was cancelled is fetched again when needed: a later scan reads everything.
    assert [tuple(r) for r in log.scan()] == archived[2]


def test_a_scan_ending_on_a_damaged_object_cancels_its_read_ahead(archived, tmp_path):
    root, path, written = archived
    copy = tmp_path / "archive"
    os.makedirs(copy / "log")
    for name in os.listdir(os.path.join(root, "log")):
        with open(os.path.join(root, "log", name), "rb") as f:
            data = bytearray(f.read())
        if name.startswith("00") and name.endswith(".log") and int(name[:20]) > 0:
            data[len(data) // 2] ^= 0xFF                 # every object after the first is damaged
        (copy / "log" / name).write_bytes(data)
    tier = _SlowTier(str(copy), 0.05)
    log = ArchivedLog(archive_reader(tier, path))
    got = []
    with pytest.raises(ArchiveCorruptError, match="SHA-256 .* another object than archived"):
        for record in log.scan():
            got.append(tuple(record))
    assert got == written[:len(got)] and got       # the first object's records, then the error
    _quiet_after(tier)
