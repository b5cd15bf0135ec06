"""Head removal on a filesystem with zero free blocks, on real small filesystems (tmpfs, loop
ext4): a read-only open, listing, consumer offsets and `remove_head` work and give the space back;
the start offset survives reopens and SIGKILLs at random instants; a retention pass under disk
force deletes; logs from before `start.offset` (state.db only) open, migrate and remove."""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from commitlog import CommitLog, CorruptLogError, OffsetOutOfRangeError, StoreFullError
from commitlog.layout import list_segments, start_offset_path, state_path
from commitlog.startoffset import FILE_SIZE, StartOffsetFile, decode_slot, encode_slot

from cl_helpers import child_env

FILESYSTEMS = pytest.mark.parametrize("small_fs", [("tmpfs", 8 << 20), ("ext4", 16 << 20)],
                                      indirect=True, ids=["tmpfs", "ext4"])
SEGMENT = 128 * 1024
RECORD = b"r" * 1000


def fill_to_the_last_block(mount: str) -> str:
    """Grow `<mount>/filler` until ENOSPC, down to single bytes: zero free blocks after."""
    filler = os.path.join(mount, "filler")
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for chunk in (1 << 20, 64 << 10, 4096, 512, 1):
            data = bytes(chunk)
            while True:
                try:
                    os.write(fd, data)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break
        os.fsync(fd)
    finally:
        os.close(fd)
    assert os.statvfs(mount).f_bavail == 0
    return filler


def free_bytes(mount: str) -> int:
    st = os.statvfs(mount)
    return st.f_bavail * st.f_frsize


def build_log(path: str, *, records: int | None = None) -> int:
    """A log of SEGMENT-sized segments, `records` long or (None) until the disk refuses a
    segment; a group "etl" commits 5. Returns the end offset."""
    with CommitLog.open(path, SEGMENT, flush="none", refuse_writes_ratio=None) as log:
        log.append_batch([RECORD] * 10)
        log.commit("etl", 5)
        try:
            while records is None or log.end_offset < records:
                log.append(RECORD)
        except StoreFullError:
            pass
        return log.end_offset


def check_consistent(path: str, previous_start: int = 0) -> int:
    """Open read-only and check the start offset against the files; returns it."""
    with CommitLog.open(path, readonly=True) as log:
        start = log.start_offset
        assert start >= previous_start, "the start offset went back"
        infos = log.segments()
        assert infos[0].base_offset == start  # dense offsets: the first kept segment starts it
        assert log.read(start).offset == start
        if start:
            with pytest.raises(OffsetOutOfRangeError):
                log.read(start - 1)  # nothing below the start offset is served
        assert log.committed() == {"etl": 5}
        log.finish_removals()  # a half-done removal is finished, by a read-only opener too
    listing = list_segments(path)
    assert not listing.deleted
    assert listing.bases[0] == start, (listing.bases[:3], start)
    return start


# ---------------------------------------------------------------------------- the basic case
@FILESYSTEMS
@pytest.mark.parametrize("filled_by", ["own-segments", "other-program"])
def test_remove_head_and_read_only_open_work_on_a_disk_with_no_free_block(small_fs, filled_by):
    path = os.path.join(small_fs, "log")
    end = build_log(path, records=None if filled_by == "own-segments" else 6 * 128)
    fill_to_the_last_block(small_fs)
    with CommitLog.open(path, readonly=True) as log:  # was "disk I/O error"
        assert log.start_offset == 0 and log.end_offset == end
        assert log.committed() == {"etl": 5} and set(log.commit_times()) == {"etl"}
        segments = log.segments()
        assert len(segments) >= 4
        with pytest.raises(StoreFullError, match="no space left"):
            log.commit("etl", 7)  # a write: refused cleanly
        assert log.committed() == {"etl": 5}
        before = free_bytes(small_fs)
        result = log.remove_head()
        assert result.status == "removed" and result.base_offset == 0
        assert result.new_start_offset == segments[1].base_offset
        assert free_bytes(small_fs) - before >= SEGMENT  # the disk got its space back
        assert not os.path.exists(segments[0].path)
        assert log.start_offset == segments[1].base_offset
        with pytest.raises(OffsetOutOfRangeError):
            log.read(0)
    fill_to_the_last_block(small_fs)  # full again: the reopen reads the start offset back
    assert check_consistent(path) == segments[1].base_offset
    with CommitLog.open(path, refuse_writes_ratio=None) as log:  # the writer reopens too
        assert log.start_offset == segments[1].base_offset
        assert log.remove_head().status == "removed"
        assert log.start_offset == segments[2].base_offset


# ---------------------------------------------------------------------------- SIGKILL
def remove_heads_forever(path: str) -> None:
    """Child: remove heads on the full disk, one after the other, until killed."""
    with CommitLog.open(path, readonly=True) as log:
        print("ready", flush=True)
        while log.remove_head().status == "removed":
            pass
    print("done", flush=True)
    time.sleep(60)


@FILESYSTEMS
def test_sigkill_while_removing_heads_on_a_full_disk_leaves_offsets_and_files_agreeing(small_fs):
    path = os.path.join(small_fs, "log")
    build_log(path)
    rng = random.Random(20)
    start = 0
    kills = 0
    here = os.path.dirname(os.path.abspath(__file__))
    code = f"import sys; sys.path.insert(0, {here!r}); import test_removal_full_disk as t; " \
           f"t.remove_heads_forever({path!r})"
    for _ in range(24):
        fill_to_the_last_block(small_fs)
        child = subprocess.Popen([sys.executable, "-c", code], env=child_env(),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = child.stdout.readline()
            assert line == "ready\n", (line, child.stderr.read() if child.poll() is not None else "")
            time.sleep(rng.uniform(0, 0.004))
            child.send_signal(signal.SIGKILL)
        finally:
            child.kill()
            child.wait()
            child.stdout.close()
            child.stderr.close()
        kills += child.returncode == -signal.SIGKILL
        start = check_consistent(path, start)
    assert kills >= 20
    assert start > 0  # the kills did land among removals
    with CommitLog.open(path, refuse_writes_ratio=None) as log:  # the writer's recovery agrees
        assert log.start_offset == start


# ---------------------------------------------------------------------------- retention
@FILESYSTEMS
def test_a_retention_pass_deletes_under_disk_force_on_a_completely_full_disk(small_fs, tmp_path, capsys):
    from retention.cli import main
    path = os.path.join(small_fs, "log")
    build_log(path)
    config = tmp_path / "retention.yaml"
    config.write_text(textwrap.dedent(f"""\
        service:
          audit: {os.path.join(small_fs, "audit.jsonl")}
        logs:
          staging:
            path: {path}
            segment_size: {SEGMENT}
            policy: p
        policies:
          p:
            reserve: 72h
            files_per_pass: 3
            pause_between_files: 0s
            disk:
              clean_ratio: 0.75
              force_ratio: 0.85
              refuse_writes_ratio: 0.90
              force: true
        """))
    fill_to_the_last_block(small_fs)
    bases = list_segments(path).bases
    before = free_bytes(small_fs)
    assert main(["clean", "--config", str(config), "--json"]) == 0, capsys.readouterr().err
    result = json.loads(capsys.readouterr().out)
    assert "disk-force" in json.dumps(result)
    after = list_segments(path).bases
    assert after == bases[3:]  # the 3 oldest, young and unconsumed, forced out
    # The space of 3 segments came back, less the audit lines and state the pass then wrote on
    # this same disk (a few blocks).
    assert free_bytes(small_fs) - before >= 3 * SEGMENT - 32 * 1024
    fill_to_the_last_block(small_fs)
    assert check_consistent(path) == bases[3]


# ---------------------------------------------------------------------------- older logs
def make_legacy(path: str, start: int) -> None:
    """Turn a log into one the previous code wrote: no start.offset, the start offset as a
    row of state.db (written directly with sqlite3, as that code did)."""
    os.unlink(start_offset_path(path))
    db = sqlite3.connect(state_path(path), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("INSERT INTO log_meta(key, value) VALUES ('start_offset', ?) "
               "ON CONFLICT(key) DO UPDATE SET value = max(value, excluded.value)", (start,))
    db.close()


def test_a_log_from_before_start_offset_opens_migrates_and_removes(tmp_log_dir):
    build_log(tmp_log_dir, records=6 * 128)
    bases = list_segments(tmp_log_dir).bases
    make_legacy(tmp_log_dir, bases[2])  # an old remover crashed after advancing, before renaming
    with CommitLog.open(tmp_log_dir, readonly=True) as log:
        assert log.start_offset == bases[2]
        assert not os.path.exists(start_offset_path(tmp_log_dir))  # a read-only open writes nothing
        with pytest.raises(OffsetOutOfRangeError):
            log.read(bases[1])
    with CommitLog.open(tmp_log_dir) as log:  # the writer finishes and migrates
        assert log.start_offset == bases[2]
        assert StartOffsetFile.open(start_offset_path(tmp_log_dir)).value() == bases[2]
        assert list_segments(tmp_log_dir).bases == bases[2:]
        assert log.remove_head().new_start_offset == bases[3]
    assert check_consistent(tmp_log_dir) == bases[3]


@FILESYSTEMS
def test_a_log_from_before_start_offset_is_cleaned_on_a_full_disk(small_fs):
    path = os.path.join(small_fs, "log")
    build_log(path)
    bases = list_segments(path).bases
    make_legacy(path, 0)
    fill_to_the_last_block(small_fs)
    with CommitLog.open(path, readonly=True) as log:
        before = free_bytes(small_fs)
        result = log.remove_head()  # no room for start.offset: unlinked first, recorded after
        assert result.status == "removed" and log.start_offset == bases[1]
        # Back, less start.offset and the 32 KiB wal-index SQLite sizes once there is room.
        assert free_bytes(small_fs) - before >= SEGMENT - FILE_SIZE - (32 << 10)
        assert log.remove_head().status == "removed"  # start.offset exists now
    assert StartOffsetFile.open(start_offset_path(path)).value() == bases[2]
    fill_to_the_last_block(small_fs)
    assert check_consistent(path) == bases[2]


# ---------------------------------------------------------------------------- the file itself
def test_a_torn_slot_loses_only_the_advance_being_written(tmp_log_dir):
    build_log(tmp_log_dir, records=4 * 128)
    with CommitLog.open(tmp_log_dir) as log:
        log.remove_head()
        log.remove_head()
    name = start_offset_path(tmp_log_dir)
    f = StartOffsetFile.open(name)
    assert f.value() == 256
    f.close()
    with open(name, "r+b") as fh:  # the newest slot (sequence 3, slot 1) torn half-way
        fh.seek(4096 + 10)
        fh.write(b"\xff" * 6)
    f = StartOffsetFile.open(name)
    assert f.value() == 128  # the previous value: the removal it belonged to did not happen yet
    f.advance(256)
    assert f.value() == 256
    f.close()
    assert decode_slot(encode_slot(7, 99)) == (7, 99)
    assert decode_slot(bytes(24)) is None


@pytest.mark.parametrize("damage", ["garbage", "short"])
def test_a_damaged_start_offset_file_is_named_at_open(tmp_log_dir, damage):
    build_log(tmp_log_dir, records=2 * 128)
    name = start_offset_path(tmp_log_dir)
    with open(name, "r+b") as fh:
        if damage == "garbage":
            fh.write(os.urandom(FILE_SIZE))
        else:
            fh.truncate(100)
    with pytest.raises(CorruptLogError, match="start.offset"):
        CommitLog.open(tmp_log_dir, readonly=True)
