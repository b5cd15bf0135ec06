"""`Tier.create`, the create-exclusive write that state shared through a tier is built on: of any
number of processes creating one key at once, exactly one wins and the object holds its bytes;
the others are told the key is taken (None), never an error and never a second write. On a
directory (a hard link) and on an S3 API (moto's server: `If-None-Match: *`, 412)."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import time
from pathlib import Path

from commitlog.archive import open_tier

from archive_helpers import BUCKET

ROOT = Path(__file__).resolve().parents[2]

RACER = """
import sys
from commitlog.archive import open_tier
url, endpoint, me = sys.argv[1], sys.argv[2] or None, sys.argv[3]
tier = open_tier(url, endpoint=endpoint, region="us-east-1")
sys.stdin.readline()                       # all racers start together
won = tier.create("ledger/000001.json", ("racer " + me + " ").encode() * 1000)
print("won" if won is not None else "taken", flush=True)
"""


def _race(tier, racers: int = 8) -> list[str]:
    """`racers` processes create the same key at once; what each was told, by racer number."""
    endpoint = getattr(tier, "endpoint", None) or ""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    procs = [subprocess.Popen([sys.executable, "-c", RACER, tier.url, endpoint, str(n)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env) for n in range(racers)]
    time.sleep(2.0)                        # every racer imported and waits on its stdin
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    out = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs), out
    return out


def test_one_of_eight_processes_creating_a_key_at_once_wins_and_the_object_is_its_own(tier):
    told = _race(tier)
    assert told.count("won") == 1 and told.count("taken") == 7, told
    winner = told.index("won")
    assert tier.read("ledger/000001.json") == f"racer {winner} ".encode() * 1000
    assert list(tier.keys("ledger/")) == ["ledger/000001.json"]      # no temporary left behind


def test_create_returns_the_stored_digest_and_never_replaces_an_object(tier):
    first = tier.create("state/lease", b"holder a")
    assert first is not None and first.size == 8
    assert first.sha256 == hashlib.sha256(b"holder a").hexdigest()
    assert tier.create("state/lease", b"holder b") is None
    assert tier.read("state/lease") == b"holder a"
    tier.delete("state/lease")
    assert tier.create("state/lease", b"holder b") is not None         # free again once deleted
    assert tier.read("state/lease") == b"holder b"


def test_a_put_object_in_the_way_counts_as_taken(tmp_path, s3, s3_credentials):
    for tier in (open_tier(f"file://{tmp_path}/archive"),
                 open_tier(f"s3://{BUCKET}/taken", endpoint=s3.endpoint, region="us-east-1")):
        tier.put("k", io.BytesIO(b"put first"), 9)
        assert tier.create("k", b"created") is None and tier.read("k") == b"put first"
