"""The symlink probes' scenario: every operation that creates or rewrites a file of a log
directory, run against a directory where one name of the layout table is a symbolic link to a
victim file outside it (tests/adversary/test_symlinks_*.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from commitlog import CommitLog, UnsafeLogFileError, roll_idle
from commitlog import record as rec
from commitlog.archive import open_tier
from commitlog.archive.log_archive import LogArchive
from commitlog.spark.ledger.ledger_view import LedgerView
from commitlog.spark.writing.append_lock import append_turn
from retention.deletion import owner
from retention.deletion.hung import HungRegistry

SEGMENT = 4096
RECORD = b"r" * 100                       # 33 records a 4 KiB segment
VICTIM = b"the victim's bytes, not the store's\n" * 200
VICTIM_MTIME_NS = 1_000_000_000_000_000_000   # 2001: any write would move it
DAMAGED_AT = 0        # where damage_and_recover hides record boundaries: the first record's byte


def drop_marked(offset, key, tombstone, marked):
    return "dead" if marked else None


def damage_and_recover(log_dir: Path) -> None:
    """Damage in the active segment of a closed log, found by the next writer's open: at byte
    DAMAGED_AT, damage hiding where records end (the records after it saved aside,
    `<segment>.log.<byte>.damaged`, and cut); then a record that does not verify with records
    after it that do (its offset lost). Each is written to `damage.json` through its `.tmp`."""
    segment, positions = _append_to_active(log_dir)
    assert positions[0] == DAMAGED_AT, positions  # a fresh segment, no index checkpoint after it
    _flip(segment, range(DAMAGED_AT, DAMAGED_AT + rec.FRAME_SIZE))   # length and CRC both
    CommitLog.open(log_dir).close()
    segment, positions = _append_to_active(log_dir)
    _flip(segment, [positions[-2] + rec.HEADER_SIZE + 10])   # a value byte: its boundary known
    CommitLog.open(log_dir).close()


def _append_to_active(log_dir: Path) -> tuple[str, list[int]]:
    """Records appended until the active segment holds three; its path and their positions."""
    while True:
        # create=True: a link planted in an empty directory is a name no log writes before meta.json
        with CommitLog.open(log_dir, segment_size=SEGMENT, flush="none", create=True) as log:
            log.append_batch([RECORD] * 3)
            segment = log.segments()[-1].path
        positions = _record_positions(segment)
        if len(positions) >= 3:
            return segment, positions


def _record_positions(segment: str) -> list[int]:
    """The byte position of every record of `segment` (never through a link: the probe's own
    reads and writes must not be what touches a victim)."""
    fd = os.open(segment, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        data = f.read()
    out, pos = [], 0
    while (r := rec.decode_at(data, pos, len(data))).status == rec.OK:
        out.append(pos)
        pos = r.next_position
    return out


def _flip(segment: str, positions) -> None:
    fd = os.open(segment, os.O_RDWR | os.O_NOFOLLOW)
    try:
        for at in positions:
            os.pwrite(fd, bytes([os.pread(fd, 1, at)[0] ^ 0x5A]), at)
    finally:
        os.close(fd)


def write_roll_compact(log_dir: Path) -> None:
    """A writer's life: create or open, append over several segments (rolls, seals, prepared
    segments), a group's commit, marks, a compaction of the first segment (`.cleaned`, swap,
    tombstones), close."""
    with CommitLog.open(log_dir, segment_size=SEGMENT, flush="none") as log:
        while len(log.segments()) < 4:
            log.append_batch([RECORD] * 16)
        log.commit("etl", log.start_offset + 5)
        log.mark_dead(range(log.start_offset, log.start_offset + 10))
        first = log.segments()[0].base_offset
        log.compact([[first]], drop_marked)
        log.note_tombstones({first + 20: 1.0})


def rebuild_index_and_remove_head(log_dir: Path) -> None:
    """The first segment's index lost: rebuilt at the next read (`.index.tmp`); then a forced
    head removal (`.remove.lock`, `.deleted`, start.offset)."""
    with CommitLog.open(log_dir, segment_size=SEGMENT, flush="none") as log:
        index = Path(log.segments()[0].path).with_suffix(".index")
    if index.is_file() and not index.is_symlink():
        index.unlink()
    with CommitLog.open(log_dir) as log:
        assert sum(1 for _ in log.scan()) > 0
        log.remove_head(force=True)


def sidecar_and_readers(log_dir: Path, tier_dir: Path) -> None:
    """The sidecar's files (owner lock, hung-segment registry), Spark's (ledger, append turn), an
    archive manifest refresh from a file:// tier, a time-based roll, and a read of everything."""
    key = owner.claim(str(log_dir))
    try:
        HungRegistry(str(log_dir)).held(0, time.time())
        HungRegistry(str(log_dir))
    finally:
        if key is not None:
            owner.release(key)
    with append_turn(str(log_dir), 5.0):
        pass
    LedgerView(str(log_dir)).close()
    archive = LogArchive(open_tier(f"file://{tier_dir}"), str(log_dir), "staging")
    archive.write_manifest(archive.confirm())   # the tier's identity remembered; the manifest copied
    archive.manifest()
    archive.cached_manifest()
    roll_idle(log_dir, 1e-9)
    with CommitLog.open(log_dir) as log:
        assert sum(1 for _ in log.scan()) > 0


def scenario(log_dir: Path, tier_dir: Path) -> None:
    damage_and_recover(log_dir)
    write_roll_compact(log_dir)
    rebuild_index_and_remove_head(log_dir)
    sidecar_and_readers(log_dir, tier_dir)


def plant_and_run(tmp_path: Path, name: str, *, populated: bool) -> bool:
    """Plant `<log>/name -> victim` (in a log the scenario populated first, or in an empty
    directory) and run the scenario. Asserts the victim kept its bytes and mtime and that an
    UnsafeLogFileError that stopped the scenario names the link; returns whether the scenario
    reached the name (refused it, or replaced or removed the link itself)."""
    tmp_path.mkdir()
    victim = tmp_path / "victim"
    victim.write_bytes(VICTIM)
    os.utime(victim, ns=(VICTIM_MTIME_NS, VICTIM_MTIME_NS))
    log_dir, tier_dir = tmp_path / "log", tmp_path / "tier"
    log_dir.mkdir()
    if populated:
        scenario(log_dir, tier_dir)
    link = log_dir / name
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(victim, link)
    refused = None
    try:
        scenario(log_dir, tier_dir)
    except UnsafeLogFileError as exc:
        refused = exc
    assert victim.read_bytes() == VICTIM, f"{name}: the victim's bytes changed"
    assert victim.stat().st_mtime_ns == VICTIM_MTIME_NS, f"{name}: the victim's mtime changed"
    if refused is not None:
        assert refused.path == str(link) and str(link) in str(refused), refused
        return True
    return not (link.is_symlink() and os.readlink(link) == str(victim))


def make_log(log_dir: Path, segments: int) -> list[int]:
    """A log of `segments` segments (the last active); their base offsets."""
    with CommitLog.open(log_dir, segment_size=SEGMENT, flush="none") as log:
        while len(log.segments()) < segments:
            log.append_batch([RECORD] * 16)
        return [s.base_offset for s in log.segments()]


def expire(log_dir: Path, bases) -> None:
    """Make segments look last written 30 days ago."""
    old = time.time() - 30 * 86400
    for base in bases:
        os.utime(log_dir / f"{base:020d}.log", (old, old))


def cleaner_config(tmp_path: Path, log_dir: Path, policy: str = ""):
    """A retention configuration of the one log `staging` at `log_dir` (reserve 1h, no delete
    hours: a manual pass deletes what expired)."""
    from policies import load_config
    path = tmp_path / "retention.yaml"
    path.write_text(f"service: {{audit: {tmp_path / 'audit.jsonl'}}}\n"
                    f"logs: {{staging: {{path: {log_dir}, segment_size: 4KiB}}}}\n"
                    f"policies: {{default: {{delete_at_hours: [], reserve: 1h, files_per_pass: 10, "
                    f"pause_between_files: 0ms{policy}}}}}\n")
    return load_config(path, base_dir=tmp_path)


def plant_victim(tmp_path: Path, link: Path) -> Path:
    """`link -> <tmp_path>/victim` (whatever was at `link` removed); returns the victim."""
    victim = tmp_path / "victim"
    victim.write_bytes(VICTIM)
    os.utime(victim, ns=(VICTIM_MTIME_NS, VICTIM_MTIME_NS))
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(victim, link)
    return victim


def untouched(victim: Path) -> bool:
    return victim.read_bytes() == VICTIM and victim.stat().st_mtime_ns == VICTIM_MTIME_NS
