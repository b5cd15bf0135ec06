"""Issue 34, part 2: the sidecar's own files in a log directory (`.retention.lock`, the
hung-segment registry and its temporary) planted as symbolic links: a real retention pass
refuses them by name, writes nothing through them and deletes nothing from that log."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from retention_helpers import manual_pass

from symlinks_helpers import cleaner_config, expire, make_log, plant_victim, untouched

HOLDER = textwrap.dedent("""
    import sys, time
    from commitlog import CommitLog
    log = CommitLog.open(sys.argv[1], readonly=True)
    it = log.scan()
    next(it)                      # inside the oldest segment: held (shared flock + mapping)
    print("holding", flush=True)
    time.sleep(600)
""")


def test_a_link_at_the_retention_lock_fails_the_pass_by_name(tmp_path):
    log_dir = tmp_path / "staging"
    bases = make_log(log_dir, 5)
    expire(log_dir, bases[:-1])
    victim = plant_victim(tmp_path, log_dir / ".retention.lock")
    result = manual_pass(cleaner_config(tmp_path, log_dir))
    assert result.failed and result.deleted == 0
    assert str(log_dir / ".retention.lock") in result.logs[0].error
    assert untouched(victim) and (log_dir / ".retention.lock").is_symlink()
    assert all((log_dir / f"{b:020d}.log").is_file() for b in bases)


def test_a_link_at_the_hung_registry_temporary_is_never_written_through(tmp_path):
    log_dir = tmp_path / "staging"
    bases = make_log(log_dir, 5)
    expire(log_dir, bases[:-1])
    victim = plant_victim(tmp_path, log_dir / ".retention-hung.json.tmp")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(log_dir)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        result = manual_pass(cleaner_config(tmp_path, log_dir, ", hung: {force_after: 1h}"))
    finally:
        holder.kill()
        holder.wait()
    assert untouched(victim) and (log_dir / ".retention-hung.json.tmp").is_symlink()
    assert (log_dir / f"{bases[0]:020d}.log").is_file()     # held: kept
    assert result.failed and ".retention-hung.json.tmp" in result.logs[0].errors[bases[0]]
