"""Helpers of the commit-log tests: deterministic record contents and child-process plumbing.

Children run as `python -c "import cl_helpers; cl_helpers.<function>(...)"` with this directory on
PYTHONPATH, so they are real processes that can be killed with SIGKILL."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BASE_TS = 1_600_000_000_000


def value_for(offset: int, max_len: int = 600) -> bytes:
    """The value of the record at `offset`: length and bytes both follow from the offset."""
    n = (offset * 7919 + 13) % (max_len + 1)
    seed = hashlib.blake2b(offset.to_bytes(8, "little"), digest_size=32).digest()
    return (seed * (n // 32 + 1))[:n]


def key_for(offset: int) -> bytes | None:
    """Per group of 16 offsets: no key, the empty key, a real key, no key (None and b"" must stay
    distinct). Keys and timestamps are shared within a group so a batch can cover a group."""
    kind = (offset // 16) % 4
    if kind == 1:
        return b""
    if kind == 2:
        return b"key-%d" % offset
    return None


def ts_for(offset: int) -> int:
    return BASE_TS + (offset // 16) * 1000


def batch_for(log, first: int, n: int, max_len: int = 600) -> int:
    """Append offsets first..first+n-1 (inside one group of 16) with one append_batch call: the
    fast path when the group has no keys, the keyed path otherwise."""
    assert first // 16 == (first + n - 1) // 16
    values = [value_for(o, max_len) for o in range(first, first + n)]
    if key_for(first) is None:
        return log.append_batch(values, timestamp_ms=ts_for(first))
    return log.append_batch(values, keys=[key_for(o) for o in range(first, first + n)],
                            timestamp_ms=ts_for(first))


def check_record(rec, max_len: int = 600) -> None:
    """Assert that `rec` holds exactly what the deterministic writer put at its offset."""
    off = rec.offset
    assert bytes(rec.value) == value_for(off, max_len), f"value of offset {off} differs"
    assert rec.key == key_for(off), f"key of offset {off}: {rec.key!r} != {key_for(off)!r}"
    assert rec.timestamp_ms == ts_for(off), f"timestamp of offset {off} differs"


def append_deterministic(log, offset: int, max_len: int = 600) -> int:
    return log.append(value_for(offset, max_len), key=key_for(offset), timestamp_ms=ts_for(offset))


def child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = HERE + os.pathsep + env.get("PYTHONPATH", "")
    return env


def spawn(call: str, **kwargs) -> subprocess.Popen:
    """Start `python -c "import cl_helpers; cl_helpers.<call>"` as a real child process."""
    code = f"import cl_helpers; cl_helpers.{call}"
    return subprocess.Popen([sys.executable, "-c", code], env=child_env(), **kwargs)


def report(obj) -> None:
    """A child's one-line JSON report on stdout."""
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


# ---------------------------------------------------------------------------- child bodies
def crash_appender(path: str, segment_size: int, max_len: int, seed: int) -> None:
    """Append deterministic records with flush="sync" forever, writing each returned offset (8
    bytes) to stdout right after the append returns; the parent SIGKILLs us."""
    import random

    from commitlog import CommitLog
    rng = random.Random(seed)
    out = sys.stdout.fileno()
    log = CommitLog.open(path, segment_size, flush="sync")
    os.write(out, b"R" * 8)  # ready
    while True:
        first = log.end_offset
        if rng.random() < 0.3:
            n = rng.randint(1, 16 - first % 16)
            got = batch_for(log, first, n, max_len)
            assert got == first, (got, first)
            for off in range(first, first + n):
                os.write(out, off.to_bytes(8, "little"))
        else:
            off = append_deterministic(log, first, max_len)
            assert off == first, (off, first)
            os.write(out, off.to_bytes(8, "little"))


def holder(path: str, start: int) -> None:
    """Open the log read-only, start a scan at `start` and keep the segment held until stdin
    closes or says go; then finish reading that segment's first records."""
    from commitlog import CommitLog
    log = CommitLog.open(path, readonly=True)
    it = log.scan(start)
    first = next(it)
    report({"held": first.offset})
    sys.stdin.readline()
    offsets = [first.offset]
    for _ in range(5):
        try:
            offsets.append(next(it).offset)
        except StopIteration:
            break
    it.close()
    log.close()
    report({"read": offsets})


def wait_for_line(proc: subprocess.Popen, timeout: float = 30.0) -> dict:
    """Read one JSON line from a child's stdout (bounded by `timeout`)."""
    import selectors
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            proc.kill()
            raise TimeoutError("child did not report in time")
        if sel.select(left):
            line = proc.stdout.readline()
            if not line:
                err = proc.stderr.read() if proc.stderr else ""
                raise RuntimeError(f"child exited (rc={proc.wait()}) without a report: {err}")
            return json.loads(line)


def full_disk_appender(path: str, segment_size: int, max_len: int) -> None:
    """Append until the filesystem is full (StoreFullError), report, wait for the parent to free
    space, append some more, report, exit 0. A SIGBUS would show as the exit signal."""
    from commitlog import CommitLog, StoreFullError
    log = CommitLog.open(path, segment_size, flush="none", refuse_writes_ratio=None)
    error = None
    refused = 0
    # Full means refused three times running: a refused roll may leave a segment prepared
    # before the disk filled, which the next append rightly uses.
    for _ in range(10_000_000):
        try:
            append_deterministic(log, log.end_offset, max_len)
            refused = 0
        except StoreFullError as exc:
            error = exc
            refused += 1
            if refused == 3:
                break
    end = log.end_offset
    batch_error = single_error = None
    try:
        log.append_batch([value_for(end, max_len)] * 2000)
    except StoreFullError as exc:
        batch_error = str(exc)
    try:
        log.append(b"x" * (segment_size // 2))
    except StoreFullError as exc:
        single_error = str(exc)
    report({"full": end, "error": str(error), "batch_error": batch_error,
            "single_error": single_error, "end": log.end_offset})
    sys.stdin.readline()  # the parent freed space
    resumed_from = log.end_offset
    while log.end_offset < resumed_from + 3 * segment_size // max(1, max_len):
        append_deterministic(log, log.end_offset, max_len)
    end = log.end_offset
    log.close()
    report({"resumed_from": resumed_from, "end": end})


# ---------------------------------------------------------------------------- cross-process
def _wait_for_log(path: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(os.path.join(path, "state.db")):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no log appeared at {path}")
        time.sleep(0.01)
    time.sleep(0.05)


def xp_writer(path: str, segment_size: int, seconds: float, max_len: int) -> None:
    """Append deterministic records (single and batched) for `seconds`."""
    import random

    from commitlog import CommitLog
    rng = random.Random(7)
    log = CommitLog.open(path, segment_size, flush="none")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for _ in range(50):
            first = log.end_offset
            if rng.random() < 0.3:
                batch_for(log, first, rng.randint(1, 16 - first % 16), max_len)
            else:
                append_deterministic(log, first, max_len)
        time.sleep(0.001)  # leave the readers some of the two cores
    end = log.end_offset
    log.close()
    report({"end": end})


def xp_remover(path: str, seconds: float, keep: int) -> None:
    """From a read-only open, remove head segments whenever more than `keep` exist."""
    from commitlog import CommitLog
    _wait_for_log(path)
    log = CommitLog.open(path, readonly=True)
    statuses: dict[str, int] = {}
    starts = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        log.finish_removals()  # what a sidecar's pass does first; races the other remover
        if len(log.segments()) > keep:
            result = log.remove_head()
            statuses[result.status] = statuses.get(result.status, 0) + 1
            if result.status == "removed":
                assert result.new_start_offset > result.base_offset
                assert log.start_offset >= result.new_start_offset
                starts.append(result.new_start_offset)
        time.sleep(0.005)
    assert starts == sorted(starts)
    log.close()
    report({"statuses": statuses, "last_start": starts[-1] if starts else 0})


def xp_scanner(path: str, seconds: float, max_len: int) -> None:
    """Scan from the start offset again and again (and read at random); every scan must yield
    strictly consecutive offsets with the right contents and reach at least the end offset seen
    before it began, unless a removal cut it short with OffsetOutOfRangeError."""
    import random

    from commitlog import CommitLog, OffsetOutOfRangeError
    rng = random.Random(11)
    _wait_for_log(path)
    log = CommitLog.open(path, readonly=True)
    scans = complete = oor = records = reads = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if scans % 10 == 9:  # reopen now and then: opening races removals too
            log.close()
            log = CommitLog.open(path, readonly=True)
        start = log.start_offset
        end_before = log.end_offset
        expected = start
        scans += 1
        try:
            for r in log.scan(start, zero_copy=scans % 2 == 0):
                assert r.offset == expected, f"offset {r.offset} where {expected} was expected"
                check_record(r, max_len)
                expected += 1
                records += 1
            assert expected >= end_before, f"scan from {start} stopped at {expected} < {end_before}"
            complete += 1
        except OffsetOutOfRangeError as exc:
            assert exc.offset < exc.start_offset, f"not a removal: {exc}"
            oor += 1
        for _ in range(20):
            lo, hi = log.start_offset, log.end_offset
            if hi <= lo:
                break
            off = rng.randrange(lo, hi)
            try:
                r = log.read(off)
            except OffsetOutOfRangeError as exc:
                assert exc.offset < exc.start_offset, f"not a removal: {exc}"
                oor += 1
                continue
            assert r.offset == off
            check_record(r, max_len)
            reads += 1
        if expected > start:
            log.commit("scanner", min(expected, log.end_offset))
    log.close()
    report({"scans": scans, "complete": complete, "oor": oor, "records": records, "reads": reads})


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def rolling_writer(path: str, segment_size: int, warmup_rolls: int, seconds: float,
                   keep: int = 64, at_least_rolls: int = 0) -> None:
    """Append 1000-byte records, rolling a segment every few dozen, for `seconds` after
    `warmup_rolls` rolls (longer, up to ten times as long, until `at_least_rolls` rolls: a busy
    host still gives the test its work); report the RSS (after a gc) at the end of the warm-up and
    at the end, and the rolls in between. Another process removes the head meanwhile."""
    import gc
    from commitlog import CommitLog
    value = b"w" * 1000
    per_segment = segment_size // (len(value) + 21)
    with CommitLog.open(path, segment_size=segment_size, flush="none") as log:
        for i in range(warmup_rolls):
            for _ in range(per_segment):
                log.append(value)
            while log.end_offset - log.start_offset > keep * per_segment:
                time.sleep(0.002)
        gc.collect()
        rss0, end0 = _rss_bytes(), log.end_offset
        started = time.monotonic()
        deadline, cap = started + seconds, started + 10 * seconds
        while time.monotonic() < deadline or \
                ((log.end_offset - end0) // per_segment < at_least_rolls and time.monotonic() < cap):
            for _ in range(per_segment * 10):
                log.append(value)
            # At most `keep` segments: the head remover keeps pace, as a sidecar does.
            while log.end_offset - log.start_offset > keep * per_segment and \
                    time.monotonic() < cap:
                time.sleep(0.002)
        gc.collect()
        rss1 = _rss_bytes()
        rolls = (log.end_offset - end0) // per_segment
        report({"rss0": rss0, "rss1": rss1, "rolls": rolls, "end": log.end_offset,
                "start": log.start_offset})


def head_remover(path: str) -> None:
    """Remove the head of the log at `path` as fast as it rolls, from a read-only open (as the
    sidecar does), until killed; reports its RSS at the first removal and on SIGTERM."""
    import signal
    from commitlog import CommitLog
    while not os.path.exists(os.path.join(path, "meta.json")):
        time.sleep(0.01)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    removed = 0
    rss0 = None
    with CommitLog.open(path, readonly=True) as log:
        while not stop:
            if log.remove_head().status == "removed":
                removed += 1
                if removed == 200:
                    rss0 = _rss_bytes()
            else:
                time.sleep(0.002)
    report({"removed": removed, "rss0": rss0, "rss1": _rss_bytes()})


def guarded_fast_writer(path: str, segment_size: int, seconds: float, refuse: float,
                        at_least: int = 0) -> None:
    """Append 64 KiB records as fast as the disk guard lets it for `seconds` (longer, up to ten
    times as long, until `at_least` were appended and one was refused), retrying a refused append
    after a short pause; report appended and refused counts."""
    from commitlog import CommitLog, StoreFullError
    value = b"f" * (64 * 1024 - 64)
    appended = refused = 0
    with CommitLog.open(path, segment_size=segment_size, flush="none",
                        refuse_writes_ratio=refuse, resume_ratio=refuse - 0.05) as log:
        started = time.monotonic()
        deadline, cap = started + seconds, started + 10 * seconds
        while time.monotonic() < deadline or ((appended < at_least or not refused) and time.monotonic() < cap):
            try:
                log.append(value)
                appended += 1
            except StoreFullError:
                refused += 1
                time.sleep(0.005)
    report({"appended": appended, "refused": refused})


def pressure_remover(path: str, above: float, pause: float) -> None:
    """A slow cleaner: while the disk is above `above`, remove the head, one segment per
    `pause` seconds, from a read-only open; until SIGTERM. Reports how many it removed."""
    import signal
    from commitlog import CommitLog, disk_usage
    while not os.path.exists(os.path.join(path, "meta.json")):
        time.sleep(0.01)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    removed = 0
    with CommitLog.open(path, readonly=True) as log:
        while not stop:
            if disk_usage(path).used_ratio > above and log.remove_head().status == "removed":
                removed += 1
            time.sleep(pause)
    report({"removed": removed})
