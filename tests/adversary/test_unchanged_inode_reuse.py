"""Change-driven passes attacked with inode reuse (issue 39): a file of a log unlinked and created
again at the same inode (ext4 hands the freed inode straight back), of the same size, its mtime and
the directory's put back with os.utime, within and beyond the racy window of the last key. A pass
must plan the log again whenever the swap alters its decision. Real logs on a loop-mounted ext4,
real SQLite; the racy window is waited out."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from commitlog import CommitLog
from commitlog.layout import marks_path, state_path
from policies import parse_config
from retention.deletion.cleaner import Cleaner

from retention_helpers import make_log, segment_bases, set_age
from test_unchanged_keys import _carried, _checkpoint
from racy_window import RACY

EXT4 = pytest.mark.parametrize("small_fs", [("ext4", 16 << 20)], indirect=True)


def _cleaner(tmp: Path, log: Path) -> Cleaner:
    return Cleaner(parse_config(
        f"service:\n  audit: {tmp}/audit.jsonl\nlogs:\n  a:\n    path: {log}\n    segment_size: 4KiB\n"
        f"policies:\n  default:\n    delete_at_hours: {list(range(24))}\n    reserve: 1h\n"))


def _pass_after_swap(tmp: Path, log: Path, path: Path, data, mtime_ns, wait: float):
    """Carry `log` in a cleaner's passes, swap `path` in place (`_swap_in_place`, `data()` and
    `mtime_ns()` read once it is carried), wait `wait` seconds; the next pass's result for it."""
    cleaner = _cleaner(tmp, log)
    try:
        _carried(cleaner)
        _swap_in_place(path, data(), mtime_ns())
        time.sleep(wait)
        return cleaner.run_pass().logs[0]
    finally:
        cleaner.close()


def _swap_in_place(path: Path, data: bytes, mtime_ns: int) -> None:
    """Unlink `path`, create it again holding `data` at its old inode, put back its mtime and its
    directory's (the ctimes cannot be put back)."""
    before, parent = os.stat(path), os.stat(path.parent)
    assert len(data) == before.st_size, "the scenario swaps in a file of the same size"
    os.unlink(path)
    fillers = []           # ext4 hands out its lowest free inode: lower ones freed earlier are taken first
    while True:
        with open(path, "wb") as f:
            if os.fstat(f.fileno()).st_ino == before.st_ino or len(fillers) == 64:
                f.write(data)
                break
        fillers.append(path.with_name(f"filler-{len(fillers)}"))
        os.rename(path, fillers[-1])
    for filler in fillers:
        os.unlink(filler)
    os.utime(path, ns=(before.st_atime_ns, mtime_ns))
    os.utime(path.parent, ns=(parent.st_atime_ns, parent.st_mtime_ns))
    after = os.stat(path)
    assert after.st_ino == before.st_ino, "ext4 gave the file another inode: the scenario did not happen"
    assert os.stat(path.parent).st_mtime_ns == parent.st_mtime_ns


@EXT4
@pytest.mark.parametrize("wait", [0, RACY], ids=["within-racy-window", "beyond-racy-window"])
def test_state_db_swapped_at_its_inode_with_a_later_commit_frees_what_the_group_read(small_fs, tmp_path, wait):
    log = Path(small_fs) / "a"
    bases = make_log(log, 3)
    set_age(log, bases[:-1], 7200)                 # expired, kept only for etl, which read nothing
    with CommitLog.open(log) as opened:
        opened.commit("etl", bases[0])
    db = state_path(str(log))
    _checkpoint(db)
    scratch = tmp_path / "scratch"                 # the same log elsewhere, etl having read two segments
    shutil.copytree(log, scratch)
    with CommitLog.open(scratch) as opened:
        opened.commit("etl", bases[2])
    _checkpoint(state_path(str(scratch)))
    result = _pass_after_swap(tmp_path, log, Path(db), Path(state_path(str(scratch))).read_bytes,
                              lambda: os.stat(db).st_mtime_ns, wait)
    assert not result.unchanged, "a swapped state.db was carried"
    assert segment_bases(log) == bases[2:], "what etl read outlived its deletion moment"


@EXT4
@pytest.mark.parametrize("wait", [0, RACY], ids=["within-racy-window", "beyond-racy-window"])
def test_marks_swapped_at_its_inode_plans_the_log_again(small_fs, tmp_path, wait):
    log = Path(small_fs) / "a"
    make_log(log, 2)
    with CommitLog.open(log) as opened:
        opened.mark_dead([0])
    marks = Path(marks_path(str(log)))
    def flipped() -> bytes:
        data = bytearray(marks.read_bytes())
        data[0] ^= 0xFF
        return bytes(data)
    result = _pass_after_swap(tmp_path, log, marks, flipped, lambda: os.stat(marks).st_mtime_ns, wait)
    assert not result.unchanged, "a swapped marks file was carried"


@EXT4
@pytest.mark.parametrize("wait", [0, RACY], ids=["within-racy-window", "beyond-racy-window"])
def test_a_segment_swapped_at_its_inode_for_an_expired_copy_is_deleted_at_once(small_fs, tmp_path, wait):
    """The listing kept (name, inode) alone: a segment unlinked and written again at its inode with
    an mtime two hours back (a restore, `cp --preserve` after an `rm`) was carried for the hour its
    old mtime had left, the deletion the new one called for missed."""
    log = Path(small_fs) / "a"
    bases = make_log(log, 3)                       # young: nothing goes for an hour
    head = log / f"{bases[0]:020d}.log"
    result = _pass_after_swap(tmp_path, log, head, head.read_bytes, lambda: time.time_ns() - 7200 * 10**9, wait)
    assert not result.unchanged, "a swapped segment was carried"
    assert segment_bases(log) == bases[1:], "the expired segment outlived its deletion moment"


@EXT4
def test_a_segment_renamed_over_with_the_directorys_mtime_put_back_is_seen(small_fs, tmp_path):
    """A new inode at a segment's name, the directory's mtime restored: its ctime still moved,
    so the directory is listed again."""
    log = Path(small_fs) / "a"
    bases = make_log(log, 3)
    cleaner = _cleaner(tmp_path, log)
    try:
        _carried(cleaner)
        head, parent = log / f"{bases[0]:020d}.log", os.stat(log)
        spare = log / "spare"
        spare.write_bytes(head.read_bytes())
        old = time.time() - 7200
        os.utime(spare, (old, old))
        os.rename(spare, head)
        os.utime(log, ns=(parent.st_atime_ns, parent.st_mtime_ns))
        time.sleep(RACY)
        assert not cleaner.run_pass().logs[0].unchanged, "a segment renamed over was carried"
        assert segment_bases(log) == bases[1:]
    finally:
        cleaner.close()
