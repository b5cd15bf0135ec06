"""Finding processes that keep deleted segment files alive: real child processes holding real
files open and mapped, processes exiting while the scan runs, and /proc entries the scanner may not
read."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from retention import find_pinned, pinned_bytes

SIZE = 64 * 1024

HOLD = textwrap.dedent("""
    import ctypes, mmap, os, sys, time
    path, how = sys.argv[1], sys.argv[2]
    fd = os.open(path, os.O_RDONLY)
    if how == "mapped":
        # libc's mmap, since Python's mmap object keeps a dup of the descriptor open
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        addr = libc.mmap(None, os.fstat(fd).st_size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
        os.close(fd)                  # only the mapping keeps the file alive
    print("holding", flush=True)
    time.sleep(600)
""")


def segment(log_dir: Path, base: int) -> Path:
    path = log_dir / f"{base:020d}.log"
    path.write_bytes(os.urandom(SIZE))  # real blocks, so st_blocks counts them
    return path


def hold(path: Path, how: str) -> subprocess.Popen:
    script = path.parent.parent / "pinned_test_holder.py"
    script.write_text(HOLD)
    proc = subprocess.Popen([sys.executable, str(script), str(path), how], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "holding"
    return proc


def unlink_as_the_store_does(path: Path) -> None:
    doomed = str(path) + ".deleted"
    os.rename(path, doomed)
    os.unlink(doomed)


def test_reports_each_holder_by_pid_command_and_bytes_counting_each_file_once(tmp_path):
    log_dir = tmp_path / "log"
    log_dir.mkdir()
    a, b = segment(log_dir, 0), segment(log_dir, 33)
    kept = segment(log_dir, 66)                     # held but not deleted: not reported
    holders = [hold(a, "open"), hold(a, "mapped"), hold(b, "mapped"), hold(kept, "open")]
    try:
        unlink_as_the_store_does(a)
        unlink_as_the_store_does(b)
        pins = find_pinned([str(log_dir)])
        got = {(p.pid, p.path, p.how, p.bytes) for p in pins}
        assert got == {(holders[0].pid, str(a), "open", SIZE), (holders[1].pid, str(a), "mapped", SIZE),
                       (holders[2].pid, str(b), "mapped", SIZE)}
        assert all(p.command.startswith(f"{sys.executable} {tmp_path}/pinned_test_holder.py ")
                   for p in pins)
        assert pinned_bytes(pins) == 2 * SIZE      # a held by two processes counts once
        assert find_pinned([str(tmp_path / "elsewhere")]) == []
    finally:
        for h in holders:
            h.kill()
            h.wait()
    assert find_pinned([str(log_dir)]) == []


def test_processes_exiting_during_scans_never_break_a_scan(tmp_path):
    log_dir = tmp_path / "log"
    log_dir.mkdir()
    stop = threading.Event()
    started: list[int] = []

    def churn():
        # Holders of a deleted file appear and die (SIGKILL) continuously, bounded in count.
        for i in range(40):
            if stop.is_set():
                return
            path = segment(log_dir, 1000 + i)
            h = hold(path, "mapped" if i % 2 else "open")
            started.append(h.pid)
            unlink_as_the_store_does(path)
            time.sleep(0.005)
            h.send_signal(signal.SIGKILL)
            h.wait()

    t = threading.Thread(target=churn)
    t.start()
    scans = 0
    try:
        while t.is_alive() and scans < 500:
            for p in find_pinned([str(log_dir)]):
                assert p.pid in started and p.path.startswith(str(log_dir))
            scans += 1
    finally:
        stop.set()
        t.join()
    assert scans > 5 and len(started) >= 5
    assert find_pinned([str(log_dir)]) == []


# Run in processes started by exec, not forked from pytest: a fork of this multi-threaded process
# (Spark's py4j threads, among others) can hang in the child on a lock another thread held.
HOLD_AS_NOBODY = textwrap.dedent("""
    import ctypes, mmap, os, sys, time
    fd = os.open(sys.argv[1], os.O_RDONLY)
    m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)   # opened and mapped as root, then held as nobody
    os.setgid(65534)
    os.setuid(65534)
    ctypes.CDLL(None).prctl(4, 1)               # PR_SET_DUMPABLE: /proc/self stays owned by nobody
    print("holding", flush=True)
    time.sleep(600)
""")
FIND_AS_NOBODY = textwrap.dedent("""
    import os, sys
    from retention import find_pinned
    os.setgroups([])
    os.setgid(65534)                 # dropped here: the interpreter under /root is not nobody's to run
    os.setuid(65534)
    print(repr(sorted((p.pid, p.path, p.how) for p in find_pinned([sys.argv[1]]))))
""")


def _found_as_nobody(log_dir: Path) -> str:
    """What `find_pinned` finds under `log_dir` run with uid/gid nobody (printed repr)."""
    done = subprocess.run([sys.executable, "-c", FIND_AS_NOBODY, str(log_dir)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_proc_entries_the_scanner_cannot_read_are_skipped(tmp_path):
    if os.geteuid() != 0:
        import pytest
        pytest.skip("needs root to drop to another user")
    log_dir = tmp_path / "log"
    log_dir.mkdir()
    root_held, nobody_held = segment(log_dir, 0), segment(log_dir, 33)
    root_holder = hold(root_held, "mapped")
    holder = subprocess.Popen([sys.executable, "-c", HOLD_AS_NOBODY, str(nobody_held)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        unlink_as_the_store_does(root_held)
        unlink_as_the_store_does(nobody_held)
        as_root = {(p.pid, p.path) for p in find_pinned([str(log_dir)])}
        assert as_root == {(root_holder.pid, str(root_held)), (holder.pid, str(nobody_held))}
        # nobody cannot read root's /proc/PID/fd or maps: skipped, no error, the rest still found.
        # (Python's mmap keeps a dup of the descriptor, so this holder shows as "open".)
        assert _found_as_nobody(log_dir) == repr([(holder.pid, str(nobody_held), "open")])
    finally:
        for proc in (holder, root_holder):
            proc.kill()
            proc.wait()


def test_this_process_s_own_descriptor_of_a_deleted_segment_is_reported_among_its_many(tmp_path):
    log_dir = tmp_path / "log"
    log_dir.mkdir()
    held = segment(log_dir, 0)
    kept = [os.open(segment(log_dir, 33 * (i + 1)), os.O_RDONLY) for i in range(50)]   # named: not pinned
    fd = os.open(held, os.O_RDONLY)
    try:
        unlink_as_the_store_does(held)
        got = {(p.pid, p.path, p.how, p.bytes) for p in find_pinned([str(log_dir)])}
        assert got == {(os.getpid(), str(held), "open", SIZE)}
    finally:
        for f in kept + [fd]:
            os.close(f)
