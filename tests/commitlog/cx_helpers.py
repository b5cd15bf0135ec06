"""Child processes of the compaction tests: a keyed writer that marks, a verifying reader, and a
compactor that can SIGKILL itself at its Nth file-system call. Run as
`python -c "import cx_helpers; cx_helpers.<function>(...)"` with this directory on PYTHONPATH."""

from __future__ import annotations

import os
import signal
import sys
import time

from cl_helpers import report, value_for

from commitlog import CommitLog, InvalidArgumentError, StoreFullError
from commitlog.layout import CLEANED_SUFFIX


def key_of(offset: int) -> bytes | None:
    """Every third offset has no key (never superseded); the others cycle through 11 keys."""
    return None if offset % 3 == 0 else b"k%d" % (offset % 11)


def marked_by_writer(offset: int) -> bool:
    """The writer marks the unkeyed records at multiples of 15 (keyed ones are never marked, so
    the newest of a key is known without a snapshot)."""
    return offset % 15 == 0


def check(rec) -> None:
    if rec.key != key_of(rec.offset) or bytes(rec.value) != value_for(rec.offset, 300):
        raise AssertionError(f"record {rec.offset} holds the wrong content")


def cx_writer(path: str, segment_size: int, stop_file: str, max_records: int = 10**9) -> None:
    """Append keyed records (flush sync), marking the writer's share dead as it goes, until
    `stop_file` exists; reports the end offset."""
    with CommitLog.open(path, segment_size=segment_size, flush="sync", on_full="block") as log:
        report({"ready": True})
        while not os.path.exists(stop_file) and log.end_offset < max_records:
            first = log.end_offset
            for o in range(first, first + 30):
                log.append(value_for(o, 300), key=key_of(o), timestamp_ms=1_600_000_000_000 + o)
            log.mark_dead([o for o in range(first, first + 30) if marked_by_writer(o)])
            time.sleep(0.002)
        report({"end": log.end_offset})


def cx_reader(path: str, stop_file: str) -> None:
    """Scan the log read-only again and again, checking each record's content and order, until
    `stop_file` exists; exits 1 on the first wrong record."""
    scans = 0
    try:
        while not os.path.exists(stop_file):
            with CommitLog.open(path, readonly=True) as log:
                last = -1
                for rec in log.scan():
                    check(rec)
                    if rec.offset <= last:
                        raise AssertionError(f"offset {rec.offset} after {last}")
                    if marked_by_writer(rec.offset) and log._segs.marks.is_marked(rec.offset):
                        raise AssertionError(f"marked record {rec.offset} returned")
                    last = rec.offset
            scans += 1
    except AssertionError as exc:
        report({"error": str(exc)})
        sys.exit(1)
    report({"scans": scans})


def keyed_decide(log: CommitLog):
    """A snapshot and the rule the tests compact with: marked -> dead, a key's record older than
    its newest settled one -> superseded."""
    marks = log.marks_snapshot()
    newest: dict[bytes, int] = {}
    for offset, key, _, marked in log.record_facts(marks):
        if key is not None and not marked:
            newest[key] = offset

    def decide(offset, key, tombstone, marked):
        if marked:
            return "dead"
        if key is not None and newest.get(key, offset) > offset:
            return "superseded"
        return None
    return marks, decide


def merge_runs(log: CommitLog, fill: float = 0.6) -> list[list[int]]:
    """Consecutive sealed segments merged while their live bytes stay under `fill` of a segment
    (the last, active segment never)."""
    runs: list[list[int]] = []
    size = 0
    for s in log.segments()[:-1]:
        if runs and size + s.live_bytes <= fill * log.segment_size:
            runs[-1].append(s.base_offset)
            size += s.live_bytes
        else:
            runs.append([s.base_offset])
            size = s.live_bytes
    return runs


def assert_one_file_per_offset(log: CommitLog) -> None:
    """Every segment file starts at or after the end of the one before (no offset in two
    files), and no `.cleaned` file is left."""
    segs = log._segs
    prev_end = -1
    for base in list(segs.list().bases)[:-1]:
        assert base >= prev_end, f"offset {base} is served by two files"
        prev_end = segs.summary(base).end_offset(base)
    assert not [n for n in os.listdir(log.path) if n.endswith(CLEANED_SUFFIX)]


COMPACTION_STEPS = ("rename", "unlink", "fsync", "write", "replace", "utime")
MARKS_REWRITE_STEPS = ("pwrite", "fsync", "fdatasync", "replace", "posix_fallocate")


def _kill_at(n: int, steps: tuple[str, ...] = COMPACTION_STEPS) -> None:
    """SIGKILL this process at its nth call of one of the `os` functions `steps` (the
    file-system steps a compaction, or a marks rewrite, makes)."""
    calls = [0]

    def wrap(fn):
        def inner(*args, **kwargs):
            calls[0] += 1
            if calls[0] == n:
                os.kill(os.getpid(), signal.SIGKILL)
            return fn(*args, **kwargs)
        return inner
    for name in steps:
        setattr(os, name, wrap(getattr(os, name)))


def cx_compactor(path: str, kill_at: int = 0, rounds: int = 10**9, fill: float = 0.6) -> None:
    """Compact the log (read-only handle, as the sidecar would) in pairs of sealed segments,
    round after round; with kill_at, SIGKILL itself at that file-system call."""
    if kill_at:
        _kill_at(kill_at)
    outputs = 0
    with CommitLog.open(path, readonly=True) as log:
        report({"ready": True})
        for _ in range(rounds):
            runs = merge_runs(log, fill)
            if not runs:
                time.sleep(0.01)
                continue
            marks, decide = keyed_decide(log)
            try:
                outputs += len(log.compact(runs, decide, marks=marks))
            except (StoreFullError, InvalidArgumentError):
                time.sleep(0.01)  # no room, or a run that no longer fits or changed meanwhile
    report({"outputs": outputs})


def cx_shrink_marks(path: str, kill_at: int = 0) -> None:
    """Rewrite the log's marks file without its obsolete entries (forced), under the compaction
    lock as a compaction would; with kill_at, SIGKILL itself at that call of a step the rewrite
    makes. Reports the entries before and after."""
    from commitlog.cleanup.marks_shrink import shrink_marks
    from commitlog.cleanup.swap import compaction_lock
    if kill_at:
        _kill_at(kill_at, MARKS_REWRITE_STEPS)
    with CommitLog.open(path, readonly=True) as log:
        with compaction_lock(path):
            report({"shrunk": shrink_marks(log._segs, force=True)})
