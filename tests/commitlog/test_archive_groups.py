"""Consumer groups' commits of a cluster log on its tier (commitlog.archive.groups): the newest
commit is the group's offset from every host; racing committers each create a commit of their
own, none lost or overwritten; on a directory and on an S3 API (moto's server)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from commitlog.archive import groups
from commitlog.errors import ArchiveCorruptError, InvalidCommitError

ROOT = Path(__file__).resolve().parents[2]

COMMITTER = """
import sys
from commitlog.archive import groups, open_tier
url, endpoint, me, times = sys.argv[1], sys.argv[2] or None, int(sys.argv[3]), int(sys.argv[4])
tier = open_tier(url, endpoint=endpoint, region="us-east-1")
sys.stdin.readline()                       # all committers start together
for n in range(times):
    made = groups.commit(tier, "log", "etl", 1000 * me + n, now_ms=n, host=f"host-{me}")
    print(made.number, made.offset, flush=True)
"""


def test_the_newest_commit_of_each_group_is_its_offset(tier):
    assert groups.committed(tier, "log") == {}
    groups.commit(tier, "log", "etl", 10, now_ms=1, host="host-a")
    groups.commit(tier, "log", "etl", 25, now_ms=2, host="host-b")
    groups.commit(tier, "log", "audit", 7, now_ms=3, host="host-a")
    found = groups.committed(tier, "log")
    assert {g: (c.offset, c.committed_at_ms, c.host) for g, c in found.items()} == \
        {"etl": (25, 2, "host-b"), "audit": (7, 3, "host-a")}
    assert groups.committed(tier, "other") == {}


def test_a_group_may_move_back_and_the_same_offset_writes_nothing(tier):
    first = groups.commit(tier, "log", "etl", 30, now_ms=1)
    again = groups.commit(tier, "log", "etl", 30, now_ms=2)
    assert again == first
    groups.commit(tier, "log", "etl", 12, now_ms=3)
    assert groups.committed(tier, "log")["etl"].offset == 12
    assert len(list(tier.keys("log/groups/"))) == 2


def test_group_names_that_are_no_path_component_are_kept_apart(tier):
    names = ["a/b", ".", "..", "100%", "größe", "a b"]
    for n, name in enumerate(names):
        groups.commit(tier, "log", name, n, now_ms=n)
    assert {g: c.offset for g, c in groups.committed(tier, "log").items()} == \
        {name: n for n, name in enumerate(names)}
    assert all(k.startswith("log/groups/") for k in tier.keys(""))


def test_old_commits_are_pruned_to_the_newest_few(tier):
    for offset in range(12):
        groups.commit(tier, "log", "etl", offset, now_ms=offset)
    kept = sorted(tier.keys("log/groups/"))
    assert len(kept) == groups.KEEP
    assert kept[-1] == groups.group_key("log", "etl", 11)
    assert groups.committed(tier, "log")["etl"].offset == 11


def test_a_bad_offset_or_group_is_refused_and_writes_nothing(tier):
    with pytest.raises(InvalidCommitError):
        groups.commit(tier, "log", "etl", -1, now_ms=0)
    with pytest.raises(InvalidCommitError):
        groups.commit(tier, "log", "etl", 9, now_ms=0, end_offset=8)
    with pytest.raises(InvalidCommitError):
        groups.commit(tier, "log", "", 1, now_ms=0)
    assert list(tier.keys("log/")) == []


def test_a_damaged_commit_is_named(tier):
    tier.create(groups.group_key("log", "etl", 0), b'{"group": "etl", "offset": "x"}')
    with pytest.raises(ArchiveCorruptError, match="group commit"):
        groups.committed(tier, "log")


def test_racing_committers_each_create_their_own_commit(tier):
    endpoint = getattr(tier, "endpoint", None) or ""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    procs = [subprocess.Popen([sys.executable, "-c", COMMITTER, tier.url, endpoint, str(me), "4"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
             for me in range(1, 5)]
    time.sleep(2.0)                        # every committer imported and waits on its stdin
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    made: list[tuple[int, int]] = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0, out
        mine = [tuple(map(int, line.split())) for line in out.splitlines()]
        assert len(mine) == 4 and [n for n, _ in mine] == sorted({n for n, _ in mine})   # each newer than its last
        made += mine
    numbers = sorted(number for number, _ in made)
    top = numbers[-1]
    assert sorted(set(numbers)) == list(range(top + 1))  # no number skipped
    # Each commit its own number, but for one made by a committer stalled across KEEP newer ones,
    # at a number pruned meanwhile (the module docstring): never among the newest KEEP.
    assert all(numbers.count(n) == 1 for n in range(top - groups.KEEP + 1, top + 1)), numbers
    last = max(made)
    assert groups.committed(tier, "log")["etl"].offset == last[1]
