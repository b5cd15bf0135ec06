"""commitlog.archive.local_copies: a host's copy is served only as the bytes that were checked
(never a file put in its place afterwards), and a FIFO planted as a copy or as the marker is
refused unopened (each such call in a subprocess with a timeout: a regression fails, not hangs)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest

from commitlog.archive import local_copies, open_tier, versions
from commitlog.spark.cluster import commit as committing
from commitlog.spark.cluster.staging import stage

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(local_copies.__file__)))
_REPO = os.path.dirname(_REPO)


@pytest.fixture
def cached(tmp_path):
    """(tier, the cache's directory, the staged objects) of a log of 10 records committed."""
    tier = open_tier(f"file://{tmp_path}/tier")
    versions.mark_cluster(tier, "events", 0)
    cache = str(tmp_path / "events")
    assert local_copies.mark(cache, tier.url, None, None, "events")
    staged = stage(tier, "events", "j", "a", 64 * 1024, ((os.urandom(100), b"k") for _ in range(10)), cache)
    committing.commit(tier, "events", "j", staged, lambda s: s or "{}")
    return tier, cache, staged


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("how", ["renamed over", "written in place"])
def test_a_copy_changed_after_its_check_is_never_served(cached, how):
    tier, cache, staged = cached
    key, path = f"events/{staged[0].key}", local_copies.cached_object_path(cache, staged[0].key)
    reader = local_copies.CachedTier(tier, cache, "events")
    first = reader.read(key)
    assert _sha(first) == staged[0].sha256 and key in reader.served
    bad = bytearray(first)
    bad[40] ^= 1                                                     # the same size, a byte flipped
    if how == "renamed over":
        with open(path + ".evil", "wb") as f:
            f.write(bad)
        os.replace(path + ".evil", path)
    else:
        os.chmod(path, 0o644)
        with open(path, "r+b") as f:
            f.write(bad)
    assert _sha(reader.read(key)) == staged[0].sha256
    assert reader.read_range(key, 40, 1) == first[40:41]
    assert reader.head(key).sha256 == staged[0].sha256
    reader.close()


def test_copies_are_served_from_a_bounded_number_of_descriptors(cached, monkeypatch):
    tier, cache, staged = cached
    monkeypatch.setattr(local_copies.CachedTier, "KEPT", 1)
    reader = local_copies.CachedTier(tier, cache, "events")
    keys = [f"events/{k}" for s in staged for k in (s.key, s.index_key)]
    for _ in range(2):
        for key in keys:
            assert reader.read(key) == tier.read(key)
    assert len(keys) > 1 and sum(c is not None for c in reader._copies.values()) <= 1
    assert set(keys) <= reader.served
    reader.close()
    assert not reader._copies


def _run(code: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": _REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60, env=env)


def test_a_fifo_as_a_copy_is_read_from_the_tier_not_waited_on(cached):
    tier, cache, staged = cached
    path = local_copies.cached_object_path(cache, staged[0].key)
    os.unlink(path)
    os.mkfifo(path)
    run = _run("""
import hashlib, sys
from commitlog.archive import local_copies, open_tier
reader = local_copies.CachedTier(open_tier(sys.argv[1]), sys.argv[2], "events")
print(hashlib.sha256(reader.read(sys.argv[3])).hexdigest(), reader.served)
""", tier.url, cache, f"events/{staged[0].key}")
    assert run.returncode == 0 and run.stdout == f"{staged[0].sha256} set()\n", run.stderr
    assert os.path.exists(path)                                      # refused and left, not removed


def test_a_fifo_as_the_marker_is_refused_not_waited_on(cached):
    tier, cache, _ = cached
    marker = os.path.join(cache, "cluster-cache.json")
    os.unlink(marker)
    os.mkfifo(marker)
    run = _run("""
import sys
from commitlog import UnsafeLogFileError
from commitlog.archive import local_copies
print(local_copies.mark(sys.argv[2], sys.argv[1], None, None, "events"))
try:
    local_copies.read_marker(sys.argv[2])
except UnsafeLogFileError as exc:
    print("FIFO" in str(exc))
""", tier.url, cache)
    assert run.returncode == 0 and run.stdout == "False\nTrue\n", run.stderr


def test_tasks_marking_one_directory_at_once_all_keep_their_copies(tmp_path):
    # A cluster write's tasks on one host mark the log's directory at the same moment (CI saw one
    # task's rename take the other's temporary file: that task kept no copies). Four processes
    # mark each of 150 fresh directories together, from one fresh interpreter (no pytest threads
    # forked); every mark succeeds and leaves a whole marker.
    run = _run("""
import os, sys
from concurrent.futures import ProcessPoolExecutor
from commitlog.archive import local_copies
def one(d):
    return local_copies.mark(d, "file:///tier", None, None, "events")
failed = 0
with ProcessPoolExecutor(4) as pool:
    for i in range(150):
        d = os.path.join(sys.argv[1], str(i))
        failed += list(pool.map(one, [d] * 4)).count(False)
        assert local_copies.read_marker(d) == local_copies.CacheMarker("file:///tier", None, None, "events")
print(failed)
""", str(tmp_path))
    assert run.returncode == 0 and run.stdout == "0\n", (run.stdout, run.stderr)
