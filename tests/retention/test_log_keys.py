"""A log directory's `Listing` (retention.deletion.log_keys): listed whole when the directory's
times move, and while they stand only the entries that were racily recent at the listing are
looked at again, each by a stat of its own, until they settle. Real files on tmp_path; the
moment of each read is given (`now_ns`), the files' times are real."""

from __future__ import annotations

import os
import time

import pytest

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
    now = time.time_ns()
    first = _read(listing, log, now)
    looked = _spy(monkeypatch)
    assert _read(listing, log, now + 1) == first        # nothing changed: the same key ...
    assert looked == [active.name]                      # ... from a stat of the racy entry alone
    with open(active, "ab") as f:
        f.write(b"z")                                   # written again: its size moves
    second = _read(listing, log, now + 2)
    assert second != first and looked == [active.name] * 2
    later = time.time_ns() + WINDOW                     # the write settled: looked at once more ...
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
    now = time.time_ns()
    first = _read(listing, log, now)
    st = os.stat(active)
    time.sleep(0.01)
    with open(active, "r+b") as f:
        f.write(b"z")                                   # in place: the size stands
    os.utime(active, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(active).st_size == st.st_size and os.stat(active).st_mtime_ns == st.st_mtime_ns
    assert _read(listing, log, now + 1) != first
