"""A log directory's `Listing` (retention.deletion.log_keys): listed whole when the directory's
times move, and while they stand only the entries that were racily recent at the listing are
looked at again, each by a stat of its own, until they settle. Real files on tmp_path; the
moment of each read is given (`now_ns`), the files' times are real."""

from __future__ import annotations

import fcntl
import os
import time

import pytest

from commitlog import CommitLog
from retention.deletion import log_keys
from retention.deletion.log_keys import Listing

WINDOW = 200_000_000      # the racy window the tests set: 0.2 s


@pytest.fixture(autouse=True)
def _window(monkeypatch):
    monkeypatch.setattr(log_keys, "RACY_NS", WINDOW)


def _read(listing: Listing, path, now_ns: int) -> int:
    return listing.read(str(path), os.stat(path), now_ns)


def _age(path, seconds: float) -> None:
    """Every file under `path` and `path` itself dated `seconds` ago (mtime; ctime is now)."""
    at = time.time() - seconds
    for name in os.listdir(path):
        os.utime(path / name, (at, at))
    os.utime(path, (at, at))


def _just_after(*paths) -> int:
    """The moment just after the newest time of `paths`: a read then finds them racily recent
    however long the test was stalled before it (its reads are dated by the files, not the clock)."""
    return max(max(st.st_mtime_ns, st.st_ctime_ns) for st in map(os.stat, paths)) + 1


def _spy(monkeypatch) -> list[str]:
    """The names the listing looks at from now on: the entries it stats alone, and "<listed>"
    for each listing of the whole directory."""
    looked: list[str] = []
    entry_at, listed = log_keys._entry_at, Listing._list
    monkeypatch.setattr(log_keys, "_entry_at", lambda path, name: looked.append(name) or entry_at(path, name))
    monkeypatch.setattr(Listing, "_list", lambda self, *a: looked.append("<listed>") or listed(self, *a))
    return looked


def _log(tmp_path, segments: int = 4):
    log = tmp_path / "log"
    log.mkdir()
    for i in range(segments):
        (log / f"{i:020d}.log").write_bytes(b"x" * 100)
    return log


def test_a_busy_log_s_active_segment_is_stat_ed_alone_and_each_write_to_it_moves_the_key(tmp_path, monkeypatch):
    log = _log(tmp_path)
    time.sleep(1.5 * WINDOW / 1e9)                      # the directory's times settle
    active = log / f"{3:020d}.log"
    with open(active, "ab") as f:
        f.write(b"y")                                   # written to: its times racily recent
    listing = Listing()
    now = _just_after(active)
    first = _read(listing, log, now)
    looked = _spy(monkeypatch)
    assert _read(listing, log, now + 1) == first        # nothing changed: the same key ...
    assert looked == [active.name]                      # ... from a stat of the racy entry alone
    with open(active, "ab") as f:
        f.write(b"z")                                   # written again: its size moves
    second = _read(listing, log, _just_after(active))
    assert second != first and looked == [active.name] * 2
    later = _just_after(active) + WINDOW                # the write settled: looked at once more ...
    assert _read(listing, log, later) == second and looked == [active.name] * 3
    assert _read(listing, log, later + 1) == second and looked == [active.name] * 3   # ... then trusted


def test_entries_that_settle_keep_the_key_they_had_and_are_not_looked_at_again(tmp_path, monkeypatch):
    log = _log(tmp_path)
    listing = Listing()
    _age(log, 3600)
    now = time.time_ns()
    first = _read(listing, log, now)                    # every ctime racily recent (just set)
    later = now + 2 * WINDOW
    assert _read(listing, log, later) == first          # settled: no change shows
    looked = _spy(monkeypatch)
    assert _read(listing, log, later + 1) == first and looked == []


@pytest.mark.parametrize("change", ["new-file", "removed", "replaced-at-its-name"])
def test_a_change_of_the_directory_lists_it_whole_again(tmp_path, change):
    log = _log(tmp_path)
    listing = Listing()
    _age(log, 3600)
    settled = time.time_ns() + 2 * WINDOW
    before = _read(listing, log, settled)
    victim = log / f"{1:020d}.log"
    if change == "new-file":
        (log / f"{9:020d}.log").write_bytes(b"x")
    elif change == "removed":
        victim.unlink()
    else:                                               # same name, same size, its mtime put back
        st = os.stat(victim)
        victim.unlink()
        victim.write_bytes(b"w" * 100)
        os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert _read(listing, log, settled + 1) != before


def test_a_racy_entry_rewritten_in_place_with_its_mtime_put_back_moves_the_key(tmp_path):
    # The same size, the mtime put back (os.utime), the directory untouched: the ctime tells.
    log = _log(tmp_path)
    time.sleep(1.5 * WINDOW / 1e9)
    active = log / f"{3:020d}.log"
    with open(active, "r+b") as f:
        f.write(b"y")
    listing = Listing()
    now = _just_after(active)
    first = _read(listing, log, now)
    st = os.stat(active)
    time.sleep(0.01)
    with open(active, "r+b") as f:
        f.write(b"z")                                   # in place: the size stands
    os.utime(active, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(active).st_size == st.st_size and os.stat(active).st_mtime_ns == st.st_mtime_ns
    assert _read(listing, log, _just_after(active)) != first


def test_a_segment_the_store_cuts_short_later_moves_the_key_of_a_busy_log(tmp_path):
    # A segment sealed short while a reader held it is cut later, in place (ftruncate, its mtime
    # put back), by a writer busy with the next segment: the directory's names stand, and the cut
    # segment was settled at the listing. The cut moves the directory's times, so it is listed
    # again (before, the key missed the cut until the directory next changed; found by helper-62).
    path = tmp_path / "log"
    writer = CommitLog.open(path, 64 * 1024, roll_after=1)
    try:
        writer.append_batch([b"v" * 100] * 5)
        with open(path / f"{0:020d}.log", "rb") as held:
            fcntl.flock(held, fcntl.LOCK_SH)                    # a reader holds segment 0 ...
            time.sleep(1.1)
            writer.append(b"next")                              # ... so the roll leaves it whole
            assert os.path.getsize(path / f"{0:020d}.log") == 64 * 1024
            time.sleep(1.5 * WINDOW / 1e9)                      # the directory's times settle
            writer.append(b"busy")                              # the active segment racy
            listing = Listing()
            first = _read(listing, path, time.time_ns())        # before the cut, still held
        writer._writer.finish_cuts()          # no reader now: cut in place (here or by the log's thread)
        assert os.path.getsize(path / f"{0:020d}.log") < 64 * 1024
        assert _read(listing, path, time.time_ns()) != first
    finally:
        writer.close()
def test_entries_racy_at_the_listing_that_settle_are_not_stat_ed_again_while_the_active_segment_stays_busy(
        tmp_path, monkeypatch):
    # Every entry's times moved in place (a `touch`, a hard-link backup moving each ctime; the
    # directory's times stand), then only the active segment keeps being written: once the
    # others settle, a pass stats the active segment alone, not every name racy at the listing
    # (until the directory moves, which a busy log's roll may take hours to).
    log = _log(tmp_path, segments=50)
    time.sleep(1.5 * WINDOW / 1e9)                      # the directory's times settle
    for name in os.listdir(log):
        os.utime(log / name)                            # in place: the directory untouched
    listing = Listing()
    _read(listing, log, min(_just_after(log / name) for name in os.listdir(log)))   # all 50 racy
    active = log / f"{49:020d}.log"
    time.sleep(1.5 * WINDOW / 1e9)                      # the others settle
    with open(active, "ab") as f:
        f.write(b"y")
    _read(listing, log, _just_after(active))            # the others looked at once more, settled
    looked = _spy(monkeypatch)
    for _ in range(3):
        with open(active, "ab") as f:
            f.write(b"z")                               # the active segment, written again
        _read(listing, log, _just_after(active))
    assert looked == [active.name] * 3
