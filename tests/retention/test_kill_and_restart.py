"""Kill and restart: a writer, a tailing reader and a retention sidecar (compaction on) share a log on
a small tmpfs that fills up; one of them is SIGKILLed in turn and restarted at random moments.

The run fails on any acknowledged record lost (neither readable with its own value, nor
superseded by a later record of its key, nor below the start offset inside an audited deletion),
on any process that died without being killed (the sidecar's start-up crash on a full disk was
one), on any intent without an outcome once a last sidecar has settled them, on any offset
audited as deleted twice, and on a removal refused more than 5 times for one segment (a log
stopped for good). The short run is part of `make test` (about 30 s); the long ones, with
several seeds, sit behind the soak marker (`pytest -m soak`).

Each run prints its counts (kills per role, acknowledged records, deletions, compactions).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from commitlog import CommitLog
from retention.audit import read_events

from chaos_children import key_of, n_of
from sidecar_helpers import Sidecar

CHILDREN = str(Path(__file__).with_name("chaos_children.py"))
ROLES = ("writer", "reader", "sidecar")

CONFIG = """
service:
  listen: 127.0.0.1:0
  audit: {audit}
  log_level: INFO
logs:
  chaos:
    path: {log}
    segment_size: 64KiB
policies:
  default:
    interval: 1s
    delete_at_hours: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23]
    reserve: 4s
    roll_after: 1s
    files_per_pass: 20
    pause_between_files: 0ms
    disk_check_interval: 1s
    disk:
      clean_ratio: 0.55
      force_ratio: 0.7
      refuse_writes_ratio: 0.85
    compaction:
      enabled: true
      interval: 2s
      keys: true
      tombstone_retention: 0s
      max_live_ratio: 0.6
      min_age: 0s
"""
# With an archive tier: uploads every second, evictions of archived segments at reserve, and
# reads of the log through both tiers when it is verified.
ARCHIVE = """
    archive:
      url: {url}
      interval: 1s
      retry_after: 1s
      max_retry_after: 2s
"""


class Fleet:
    """The three processes of the run: started, SIGKILLed and restarted, and watched for deaths
    the run did not cause."""

    def __init__(self, root: Path, fs: str, rng: random.Random, archive: str | None = None) -> None:
        self.root, self.rng, self.archive = root, rng, archive
        self.log = os.path.join(fs, "chaos")
        self.acked = root / "acked.txt"
        self.config = root / "retention.yaml"
        self.config.write_text(CONFIG.format(audit=root / "audit.jsonl", log=self.log)
                               + (ARCHIVE.format(url=archive) if archive else ""))
        self.procs: dict[str, subprocess.Popen] = {}
        self.sidecar: Sidecar | None = None
        self.kills: Counter = Counter()
        self.deaths: list[str] = []
        self.incarnation = 0

    def start(self, role: str) -> None:
        self.incarnation += 1
        if role == "sidecar":
            self.sidecar = Sidecar(self.config, cwd=self.root).start(timeout=30)
            self.procs[role] = self.sidecar.proc
            return
        args = [self.log, str(self.acked), str(self.incarnation * 10**9)] if role == "writer" \
            else [self.log, "tail"]
        err = open(self.root / f"{role}-{self.incarnation}.err", "w")
        proc = subprocess.Popen([sys.executable, CHILDREN, role, *args], stdout=subprocess.PIPE,
                                stderr=err, text=True, cwd=Path(__file__).parent)
        err.close()
        assert proc.stdout.readline().strip() == "ready", f"{role} did not start"
        proc.err_path = err.name
        self.procs[role] = proc

    def check_alive(self) -> None:
        for role, proc in self.procs.items():
            if proc.poll() is not None:
                self.deaths.append(f"{role} (pid {proc.pid}) exited {proc.returncode} unkilled: "
                                   f"{self._stderr(role)[-2000:]}")
                self.start(role)

    def _stderr(self, role: str) -> str:
        if role == "sidecar":
            return self.sidecar.log()
        return Path(self.procs[role].err_path).read_text()

    def kill(self, role: str) -> None:
        proc = self.procs[role]
        proc.kill()
        proc.wait(10)
        self.kills[role] += 1
        self.start(role)

    def stop(self) -> None:
        for role in ("writer", "reader"):
            self.procs[role].kill()
            self.procs[role].wait(10)
        code = self.sidecar.stop()                  # SIGTERM: a clean stop must exit 0
        if code != 0:
            self.deaths.append(f"sidecar exited {code} on SIGTERM: {self.sidecar.log()[-2000:]}")


def _acked(path: Path) -> dict[int, int]:
    out = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():   # a torn last line
            out[int(parts[0])] = int(parts[1])
    return out


def run(root: Path, fs: str, *, seconds: float, seed: int, archive: str | None = None) -> dict:
    rng = random.Random(seed)
    fleet = Fleet(root, fs, rng, archive)
    for role in ROLES:
        fleet.start(role)
    deadline = time.monotonic() + seconds
    turn = 0
    while time.monotonic() < deadline:
        time.sleep(rng.uniform(0.3, 1.5))
        fleet.check_alive()
        fleet.kill(ROLES[turn % 3])
        turn += 1
    time.sleep(1.0)
    fleet.check_alive()
    fleet.stop()
    # A last sidecar settles what the killed ones left, then stops cleanly.
    last = Sidecar(fleet.config, cwd=root).start(timeout=30)
    last.wait_ready(timeout=30)
    time.sleep(1.5)
    if last.stop() != 0:
        fleet.deaths.append(f"the last sidecar did not stop cleanly: {last.log()[-2000:]}")
    return _verify(fleet)


def _verify(fleet: Fleet) -> dict:
    acked = _acked(fleet.acked)
    marked_path = Path(str(fleet.acked) + ".marked")
    lines = [line.split() for line in marked_path.read_text().splitlines()] if marked_path.exists() else []
    marking = {int(p[1]) for p in lines if len(p) == 2 and p[1].isdigit()}    # maybe marked
    marked = {int(p[1]) for p in lines if len(p) == 2 and p[0] == "d" and p[1].isdigit()}
    with CommitLog.open(fleet.log, readonly=True, archive=fleet.archive) as log:
        start = log.start_offset           # with an archive, the first offset either tier holds
        present = {r.offset: n_of(r.key, r.value) for r in log.scan()}
    events = read_events(str(fleet.root / "audit.jsonl"))
    # Evictions lose nothing (their records are read back from the archive above): not counted here.
    deleted = [e for e in events if e.get("event") == "deleted" and not e.get("archived")]
    spans = sorted((e["base_offset"], e["end_offset"]) for e in deleted if not e.get("recovered"))
    # The newest offset of each key, from the log and from what was acknowledged.
    newest: dict[bytes, int] = {}
    for offset, n in list(present.items()) + list(acked.items()):
        key = key_of(n)
        newest[key] = max(newest.get(key, -1), offset)

    def audited(offset: int) -> bool:
        return any(b <= offset < e for b, e in spans) or \
            any(e["base_offset"] <= offset < e["end_offset"] for e in deleted if e.get("recovered"))

    shown = sorted(marked & set(present))
    assert not shown, f"records marked dead were read back: {shown[:5]}"
    lost = []
    for offset, n in sorted(acked.items()):
        if offset in marking:
            continue            # marked dead (or maybe, killed mid-call): gone or hidden
        if present.get(offset) == n:
            continue
        assert offset not in present, f"offset {offset} holds n={present[offset]}, acked as n={n}"
        superseded = newest[key_of(n)] > offset
        if superseded or (offset < start and audited(offset)):
            continue
        lost.append((offset, n))
    intents = {e["id"] for e in events if e.get("event") == "intent"}
    outcomes = {e["id"] for e in events if e.get("event") not in ("intent", None)}
    twice = [(a, b) for a, b in zip(spans, spans[1:]) if b[0] < a[1]]
    compactions = [e for e in events if e.get("event") == "compacted"]
    # One segment's removal refused again and again: the log stopped for good (a pass took a segment
    # older than its head first); another process winning the head now and then is a few.
    refused = Counter(e.get("segment") for e in events if e.get("reason") == "head-changed")
    stats = {"kills": dict(fleet.kills), "acked": len(acked), "start_offset": start,
             "deletions": len(deleted), "recovered": sum(1 for e in deleted if e.get("recovered")),
             "compactions": len(compactions), "aborted": sum(1 for e in events if e.get("event") == "aborted"),
             "aborted_by": dict(Counter(e.get("reason") for e in events if e.get("event") == "aborted")),
             "marked": len(marked), "lost": len(lost), "deaths": len(fleet.deaths),
             "open_intents": len(intents - outcomes), "most_refused": max(refused.values(), default=0),
             "archived": sum(1 for e in events if e.get("event") == "archived"),
             "evicted": sum(1 for e in events if e.get("event") == "deleted" and e.get("archived"))}
    print("kill-and-restart:", json.dumps(stats))
    assert not fleet.deaths, "\n\n".join(fleet.deaths)
    assert not lost, f"{len(lost)} acknowledged records lost, first {lost[:5]}"
    assert intents <= outcomes, f"intents without an outcome: {sorted(intents - outcomes)[:5]}"
    assert not twice, f"offsets audited as deleted twice: {twice[:5]}"
    assert stats["most_refused"] <= 5, f"a log stopped at one segment: {refused.most_common(1)}"
    return stats


@pytest.mark.parametrize("small_fs", [("tmpfs", 12 << 20)], indirect=True)
def test_kill_and_restart_loses_no_acknowledged_record_and_audits_every_deletion(small_fs, tmp_path):
    stats = run(tmp_path, small_fs, seconds=25, seed=18)
    # The run exercised what it claims to: every role killed, the disk cleaned and compacted.
    assert all(stats["kills"].get(role, 0) >= 3 for role in ROLES), stats
    assert stats["acked"] > 10_000 and stats["deletions"] > 0 and stats["compactions"] > 0, stats


@pytest.mark.parametrize("small_fs", [("tmpfs", 12 << 20)], indirect=True)
def test_kill_and_restart_with_an_archive_loses_no_record_through_uploads_and_evictions(small_fs, tmp_path):
    # The sidecar is killed during uploads, manifest rewrites and evictions alike; every record
    # acknowledged is read back through both tiers, or was deleted by an audited forced pass.
    stats = run(tmp_path, small_fs, seconds=25, seed=21, archive=f"file://{tmp_path}/archive")
    assert all(stats["kills"].get(role, 0) >= 3 for role in ROLES), stats
    assert stats["acked"] > 10_000 and stats["archived"] > 0 and stats["evicted"] > 0, stats


@pytest.mark.soak
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("small_fs", [("tmpfs", 24 << 20)], indirect=True)
@pytest.mark.parametrize("archived", [False, True], ids=["local", "archive"])
def test_kill_and_restart_soak(small_fs, tmp_path, seed, archived):
    stats = run(tmp_path, small_fs, seconds=240, seed=seed,
                archive=f"file://{tmp_path}/archive" if archived else None)
    assert all(stats["kills"].get(role, 0) >= 30 for role in ROLES), stats
