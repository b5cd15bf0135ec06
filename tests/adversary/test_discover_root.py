"""A local user who may write a `discover:` root attacks it (issue 39): links, swaps, odd names,
planted empty directories, a root that is a link, another filesystem under it, a root that cannot
be listed for a moment. Real directories, real sidecars, real mounts and limits."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from commitlog import CommitLog
from policies import parse_config
from retention import RetentionScheduler
from retention.deletion.cleaner import Cleaner
from retention.deletion.owner import RESERVE

from retention_helpers import make_log, segment_bases, set_age
from sidecar_helpers import Sidecar

ALL_HOURS = list(range(24))


def _config(tmp: Path, root: Path, more: str = "") -> str:
    return (f"service:\n  audit: {tmp}/audit.jsonl\ndiscover:\n  - root: {root}\n{more}"
            f"policies:\n  default:\n    delete_at_hours: {ALL_HOURS}\n    reserve: 1h\n")


def test_a_found_directory_swapped_for_a_link_locks_nothing_where_it_points(tmp_path):
    """The change-driven split claimed a log (creating and locking `.retention.lock` through the
    path) before the read checked it for a link: a swap took the lock of the log it pointed at."""
    root, elsewhere = tmp_path / "root", tmp_path / "etc"
    root.mkdir()
    make_log(elsewhere, 2)
    make_log(root / "x", 1)
    cleaner = Cleaner(parse_config(_config(tmp_path, root)))
    try:
        shutil.rmtree(root / "x")
        (root / "x").symlink_to(elsewhere)
        result = cleaner.run_pass()
        assert "symbolic link" in result.logs[0].error
        assert not (elsewhere / ".retention.lock").exists(), "a lock was taken through the link"
    finally:
        cleaner.close()


def test_odd_entries_under_a_root_are_no_logs_and_get_no_file(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    make_log(root / "ok", 1)
    os.mkfifo(root / "fifo")
    odd = [".hidden", "new\nline", "ünïcode", "-dash", "a b"]
    for name in odd:
        make_log(root / name, 1)
    before = {name: sorted(os.listdir(root / name)) for name in odd}
    config = parse_config(_config(tmp_path, root))
    assert config.discovered == {"ok"}
    cleaner = Cleaner(config)
    try:
        result = cleaner.run_pass()
    finally:
        cleaner.close()
    assert [(r.name, r.error) for r in result.logs] == [("ok", None)]
    assert {name: sorted(os.listdir(root / name)) for name in odd} == before


def test_a_root_that_is_a_link_is_read_through_it_and_a_named_log_there_stays_named(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    make_log(real / "a", 1)
    make_log(real / "b", 1)
    (tmp_path / "root").symlink_to(real)
    config = parse_config(_config(tmp_path, tmp_path / "root", f"logs:\n  named:\n    path: {real / 'b'}\n"))
    assert config.discovered == {"a"} and sorted(config.logs) == ["a", "named"]


def test_planted_empty_directories_cost_no_descriptor_and_leave_real_logs_cleaned(tmp_path):
    """40 empty directories named before the one real log, at a limit owning 24 logs: each used to
    get a `.retention.lock` and hold its descriptor, so the real log (named last) was never owned
    and never cleaned (log-no-descriptors)."""
    root = tmp_path / "root"
    root.mkdir()
    for i in range(40):
        (root / f"a{i:02d}").mkdir()
    bases = make_log(root / "zz", 4)
    set_age(root / "zz", bases[:-1], 7200)
    config = tmp_path / "retention.yaml"
    config.write_text(_config(tmp_path, root).replace("service:\n", "service:\n  listen: 127.0.0.1:0\n")
                      .replace("reserve: 1h\n", "reserve: 1h\n    interval: 1s\n")
                      + f"budgets:\n  b:\n    bytes: 1GiB\n    logs:\n      zz: {{}}\n")
    sidecar = Sidecar(config, cwd=tmp_path)
    limit = RESERVE + 24
    sidecar.user_prefix = ["prlimit", f"--nofile={limit}:{limit}"]
    with sidecar as s:
        s.wait_for(lambda: segment_bases(root / "zz") == bases[-1:], timeout=60, what="zz cleaned")
        details = s.get_json("/healthz")[1]["details"]
        assert not [d for d in details if d["problem"] == "log-no-descriptors"], details
        assert "Traceback" not in s.log()
    assert [os.listdir(root / f"a{i:02d}") for i in range(40)] == [[]] * 40


_LIST_AT_LIMIT = textwrap.dedent("""
    import os, resource, sys, time
    from policies import parse_config
    config = parse_config(open(sys.argv[1]).read())
    os.mkdir(os.path.join(sys.argv[2], "c"))
    time.sleep(2.2)                       # past the racy window: the root is listed again
    free = os.dup(0)                      # the lowest free descriptor: none at or past it from here
    os.close(free)
    resource.setrlimit(resource.RLIMIT_NOFILE, (free, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    try:
        new = config.rediscovered()
    except OSError as exc:
        print("refused", exc.errno)
    else:
        print("found", sorted(new.discovered) if new is not None else None)
""")


def test_a_root_that_cannot_be_listed_for_a_moment_forgets_none_of_its_logs(tmp_path):
    """With no descriptor free, listing the root failed and was taken for an empty root: every
    log found there was dropped, and stayed dropped while the root's mtime did not move again."""
    root = tmp_path / "root"
    root.mkdir()
    make_log(root / "a", 1)
    make_log(root / "b", 1)
    config = tmp_path / "retention.yaml"
    config.write_text(_config(tmp_path, root))
    done = subprocess.run([sys.executable, "-c", _LIST_AT_LIMIT, str(config), str(root)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["refused", "24"], done.stdout     # EMFILE: read again next pass


def test_another_filesystem_mounted_under_a_root_is_a_log_on_its_own_disk(tmp_path, small_fs):
    root = tmp_path / "root"
    (root / "x").mkdir(parents=True)
    bases = make_log(Path(small_fs) / "log", 3)
    set_age(Path(small_fs) / "log", bases[:-1], 7200)
    subprocess.run(["mount", "--bind", f"{small_fs}/log", str(root / "x")], check=True)
    try:
        scheduler = RetentionScheduler(parse_config(_config(tmp_path, root)), watch_rolls=False)
        try:
            assert scheduler.config.discovered == {"x"}
            result = scheduler.clean()
            assert segment_bases(root / "x") == bases[-1:]
            assert [r.name for r in result.logs] == ["x"] and result.logs[0].error is None
            assert os.stat(root / "x").st_dev != os.stat(root).st_dev
        finally:
            scheduler.stop()
    finally:
        subprocess.run(["umount", str(root / "x")], check=True)


def test_a_root_whose_mount_goes_and_comes_back_with_other_logs(tmp_path, small_fs):
    """The root is a mount: it goes (the empty directory under it shows), its logs are dropped and
    their figures forgotten; it comes back with another log of the same name whose old segments a
    group has not read: nothing of it goes."""
    root = Path(small_fs)
    bases = make_log(root / "a", 3)
    set_age(root / "a", bases[:-1], 600)          # younger than reserve: nothing deleted first
    config = tmp_path / "retention.yaml"
    config.write_text(_config(tmp_path, root).replace("service:\n", "service:\n  listen: 127.0.0.1:0\n")
                      .replace("reserve: 1h\n", "reserve: 1h\n    interval: 1s\n"))
    with Sidecar(config, cwd=tmp_path) as s:
        metrics = lambda: s.request("GET", "/metrics")[2].decode()      # noqa: E731
        names = lambda: sorted(log["name"] for log in s.get_json("/status")[1]["logs"])  # noqa: E731
        s.wait_for(lambda: 'retention_log_bytes{log="a"}' in metrics(), what="a's figures")
        subprocess.run(["umount", "-l", small_fs], check=True)     # detached: the sidecar holds files there
        s.wait_for(lambda: names() == [], what="a dropped")
        s.wait_for(lambda: 'retention_log_bytes{log="a"}' not in metrics(), what="a's figures forgotten")
        assert s.request("GET", "/healthz")[0] == 200
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", small_fs], check=True)
        again = make_log(root / "a", 3)
        with CommitLog.open(root / "a") as log:
            log.commit("etl", again[0])
        set_age(root / "a", again[:-1], 7200)
        s.wait_for(lambda: names() == ["a"], timeout=30, what="a found again")
        s.wait_for(lambda: next(log for log in s.get_json("/status")[1]["logs"] if log["name"] == "a")
                   .get("last_pass"), what="a passed")
        time.sleep(2)                                                # passes go on
        assert segment_bases(root / "a") == again
        assert "Traceback" not in s.log()
