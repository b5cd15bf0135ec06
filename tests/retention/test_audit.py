"""The audit trail's record format, torn tails, concurrent appenders, a missing directory, an
unwritable trail, and a full disk (tmpfs) where deletion must go on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from loguru import logger

from commitlog import CommitLog, disk_usage
from retention import AuditTrail, Cleaner, read_audit
from retention.audit import read_events

from retention_helpers import config_text, make_log, segment_bases, set_age, write_config

# Every key a deletion line has always had: readers written against the old format keep working.
DELETION_KEYS = {"time", "log", "path", "segment", "base_offset", "end_offset", "bytes", "triggers",
                 "forced", "overridden_by", "unconsumed", "pinned_by"}



def config_for(tmp_path, log_dir, audit, *, segment_size="4KiB", per_pass=2):
    text = config_text(service={"audit": str(audit)}, log={"path": str(log_dir), "segment_size": segment_size},
                       policy={"files_per_pass": per_pass,
                               "disk": {"clean_ratio": 0.70, "force_ratio": 0.80, "refuse_writes_ratio": 0.95}})
    return write_config(tmp_path, text)[1]


def test_intent_and_deletion_lines_keep_every_old_key_and_share_an_id(tmp_path):
    log_dir = tmp_path / "staging"
    bases = make_log(log_dir, 3)
    set_age(log_dir, bases, 3 * 3600)
    with CommitLog.open(log_dir, readonly=True) as log:
        log.commit("etl", 10)          # etl has not consumed [10, 33) of the first segment
    audit = tmp_path / "new" / "dir" / "audit.jsonl"       # the directory is created
    cleaner = Cleaner(config_for(tmp_path, log_dir, audit, per_pass=1))
    cleaner.trigger_manual(force=True)
    result = cleaner.run_pass()
    cleaner.close()
    assert result.deleted == 0                               # protected: etl needs it, no force
    with CommitLog.open(log_dir, readonly=True) as log:
        log.commit("etl", bases[1])
    cleaner = Cleaner(config_for(tmp_path, log_dir, audit, per_pass=1))
    cleaner.trigger_manual(force=True)
    assert cleaner.run_pass().deleted == 1
    cleaner.close()
    events = read_events(str(audit))
    assert [e["event"] for e in events] == ["intent", "deleted"]
    intent, deleted = events
    assert intent["id"] == deleted["id"] and len(intent["id"]) == 16
    assert intent["action"] == "delete" and intent["pid"] == os.getpid()
    assert DELETION_KEYS <= set(intent) and DELETION_KEYS <= set(deleted)
    assert (deleted["log"], deleted["segment"], deleted["base_offset"], deleted["end_offset"]) == \
        ("staging", f"{bases[0]:020d}.log", bases[0], bases[1])
    assert deleted["path"] == str(log_dir / f"{bases[0]:020d}.log") and deleted["bytes"] == 4096
    assert deleted["triggers"] == ["manual"] and deleted["forced"] is False and "recovered" not in deleted
    assert read_audit(str(audit)) == [deleted]


def test_old_lines_without_event_are_deletions_and_torn_lines_are_skipped(tmp_path):
    audit = tmp_path / "audit.jsonl"
    old = {"time": "2025-01-01T00:00:00.000+00:00", "log": "x", "base_offset": 0, "end_offset": 5}
    audit.write_bytes(json.dumps(old).encode() + b"\n" + b'{"event":"deleted","id":"a1","base_off')
    assert read_audit(str(audit)) == [old]
    trail = AuditTrail(str(audit))
    trail.record({"event": "deleted", "id": "b2", "base_offset": 5, "end_offset": 9})
    lines = audit.read_bytes().split(b"\n")
    assert lines[1] == b'{"event":"deleted","id":"a1","base_off'      # the torn line stays alone
    assert [e.get("id") for e in read_audit(str(audit))] == [None, "b2"]
    assert trail.unresolved() == [] and trail.torn_lines == 1


def test_an_intent_is_open_while_its_process_lives_and_settled_by_its_outcome(tmp_path):
    audit = tmp_path / "audit.jsonl"
    trail = AuditTrail(str(audit))
    ident = trail.intent("delete", {"path": "/x/0.log", "base_offset": 0})
    other = AuditTrail(str(audit))
    assert other.unresolved() == []                    # its writer (this process) is alive
    dead = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import sys; sys.path.insert(0, {str(Path(__file__).parents[2])!r})
        from retention.audit import AuditTrail
        AuditTrail({str(audit)!r}).intent("delete", {{"path": "/x/0.log", "base_offset": 0}})
    """)], capture_output=True, text=True, timeout=60)
    assert dead.returncode == 0, dead.stderr
    open_intents = other.unresolved()
    assert len(open_intents) == 1 and open_intents[0]["id"] != ident
    trail.outcome(ident, "deleted", {"path": "/x/0.log", "base_offset": 0})
    # The deletion of the same segment by another intent marks the dead one as covered.
    assert other.unresolved()[0]["covered_by"] == ident
    trail.outcome(open_intents[0]["id"], "aborted", {"reason": "removed-by-another"}, recovered=True)
    assert other.unresolved() == []


WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[3])
    from retention.audit import AuditTrail
    trail = AuditTrail(sys.argv[1])
    tag = sys.argv[2]
    for i in range(1500):
        trail.append({"event": "deleted", "id": f"{tag}{i}", "pad": tag * (1 + (i * 37) % 6000)})
""")


def test_lines_of_two_concurrent_processes_never_interleave(tmp_path):
    audit = tmp_path / "audit.jsonl"
    root = str(Path(__file__).parents[2])
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(audit), tag, root]) for tag in "ab"]
    for p in procs:
        assert p.wait(timeout=120) == 0
    raw = audit.read_bytes().split(b"\n")
    assert raw[-1] == b"" and len(raw) == 3001
    entries = [json.loads(line) for line in raw[:-1]]          # every line parses whole
    for tag in "ab":
        mine = [e for e in entries if e["id"].startswith(tag)]
        assert [e["id"] for e in mine] == [f"{tag}{i}" for i in range(1500)]
        assert all(e["pad"] == tag * len(e["pad"]) for e in mine)
    tags = [e["id"][0] for e in entries]
    assert any(x != y for x, y in zip(tags, tags[1:]))           # they did run together


def test_an_audit_trail_that_cannot_be_written_fails_the_deletion_and_deletes_nothing(tmp_path):
    log_dir = tmp_path / "staging"
    bases = make_log(log_dir, 3)
    set_age(log_dir, bases, 3 * 3600)
    (tmp_path / "not-a-dir").write_text("x")
    audit = tmp_path / "not-a-dir" / "audit.jsonl"                # ENOTDIR, not a full disk
    cleaner = Cleaner(config_for(tmp_path, log_dir, audit))
    cleaner.trigger_manual(force=True)
    result = cleaner.run_pass()
    cleaner.close()
    assert result.failed and result.deleted == 0
    error = result.logs[0].errors[bases[0]]
    assert error.startswith(f"the audit trail {audit} cannot be written:")
    assert segment_bases(log_dir) == bases


@pytest.fixture
def full_tmpfs(tmp_path):
    """A 1 MiB tmpfs filled to its last byte (the audit trail's filesystem)."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount tmpfs here: {proc.stderr.strip()}")
    try:
        with open(mnt / "filler", "wb") as f:
            try:
                while True:
                    os.write(f.fileno(), b"\0" * 4096)
            except OSError:
                pass
        assert disk_usage(str(mnt)).free_bytes == 0
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.mark.parametrize("small_fs", [("tmpfs", 8 << 20), ("ext4", 16 << 20)], indirect=True)
def test_a_full_audit_disk_does_not_stop_forced_deletion_and_lines_follow_once_space_is_back(
        tmp_path, small_fs, full_tmpfs):
    fs = Path(small_fs)
    log_dir = fs / "staging"
    with CommitLog.open(log_dir, segment_size=256 * 1024, flush="none", refuse_writes_ratio=None) as log:
        while disk_usage(str(fs)).used_ratio < 0.88:
            log.append_batch([os.urandom(1000) for _ in range(64)])
    bases = segment_bases(log_dir)
    audit = full_tmpfs / "audit" / "audit.jsonl"
    lines: list[str] = []
    sink = logger.add(lines.append, level="ERROR", format="{message}")
    try:
        cleaner = Cleaner(config_for(tmp_path, log_dir, audit, segment_size="256KiB", per_pass=3))
        result = cleaner.run_pass()
    finally:
        logger.remove(sink)
    # Deletion went on: a full disk under force is not made an outage by its audit trail.
    n = result.deleted
    assert not result.failed and n >= 1, result.to_json_dict()
    assert result.logs[0].plan.triggers[:2] == ("disk-clean", "disk-force")
    assert segment_bases(log_dir) == bases[n:]
    assert sum("anyway" in line for line in lines) == n, lines
    assert sum("kept in memory" in line for line in lines) == n   # each line logged in full
    assert all("'segment'" in line for line in lines if "kept in memory" in line)
    assert cleaner.audit.backlog == n and read_audit(str(audit)) == []
    (full_tmpfs / "filler").unlink()                             # space is back
    result = cleaner.run_pass()                                  # appends the kept lines first
    cleaner.close()
    deleted = read_audit(str(audit))
    assert [d["base_offset"] for d in deleted] == bases[:n + result.deleted]
    assert all("disk-force" in d["triggers"] for d in deleted) and cleaner.audit.backlog == 0
