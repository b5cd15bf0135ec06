"""Helpers of the store-damage probes (tests/adversary/test_store_damage_*.py): child processes
that write, seal and read a log, so a signal that kills one is seen as its exit status.

Children run as `python -c "import storea_helpers; storea_helpers.<function>(...)"` with this
directory on PYTHONPATH; they talk to the parent in JSON lines on stdout and take orders on stdin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def spawn(call: str) -> subprocess.Popen:
    """Start `python -c "import storea_helpers; storea_helpers.<call>"` as a real child."""
    env = dict(os.environ)
    env["PYTHONPATH"] = HERE + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.Popen([sys.executable, "-c", f"import storea_helpers; storea_helpers.{call}"],
                            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def report(obj) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def expect(proc: subprocess.Popen, timeout: float = 120.0) -> dict:
    """The child's next JSON line (bounded by `timeout`); its stderr in the error if it died."""
    import selectors
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    if not sel.select(timeout):
        proc.kill()
        raise TimeoutError("child did not report in time")
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"child exited (rc={proc.wait()}) without a report: {proc.stderr.read()}")
    return json.loads(line)


def tell(proc: subprocess.Popen, word: str = "go") -> None:
    proc.stdin.write(word + "\n")
    proc.stdin.flush()


def value(offset: int, record_size: int) -> bytes:
    """A value that makes the record `record_size` bytes long in all (no key)."""
    from commitlog.record import HEADER_SIZE
    n = record_size - HEADER_SIZE
    return (offset.to_bytes(8, "little") * (n // 8 + 1))[:n]


# ---------------------------------------------------------------------------- child bodies
def short_sealer(path: str, segment_size: int, record_size: int, count: int) -> None:
    """Append `count` records of `record_size` bytes, close; on "go", open again with a
    `roll_after` already passed so the writer's own background thread seals the segment short;
    report the segment's size then; on "close", wait up to a minute for the file to be cut and
    report its size again."""
    from commitlog import CommitLog
    with CommitLog.open(path, segment_size) as log:
        for i in range(count):
            log.append(value(i, record_size))
    report({"appended": count})
    sys.stdin.readline()
    log = CommitLog.open(path, segment_size, roll_after=0.05)
    seg_path = log.segments()[-1].path
    deadline = time.monotonic() + 60
    while log.segments()[-1].active and time.monotonic() < deadline:
        time.sleep(0.01)
    report({"sealed": not log.segments()[-1].active, "size": os.path.getsize(seg_path)})
    sys.stdin.readline()
    deadline = time.monotonic() + 60
    while os.path.getsize(seg_path) == segment_size and time.monotonic() < deadline:
        time.sleep(0.05)
    log.close()
    report({"size": os.path.getsize(seg_path)})


def held_scanner(path: str, hold_after: int) -> None:
    """Scan the log read-only; after `hold_after` records, report and wait for "go" with the
    segment held (the scan is suspended mid-segment); then read the rest and report the count."""
    from commitlog import CommitLog
    log = CommitLog.open(path, readonly=True)
    it = log.scan()
    offsets = [next(it).offset for _ in range(hold_after)]
    report({"held": offsets[-1]})
    sys.stdin.readline()
    offsets += [r.offset for r in it]
    log.close()
    report({"read": len(offsets), "last": offsets[-1], "contiguous": offsets == list(range(len(offsets)))})


def acked_writer(path: str, segment_size: int, count: int, value_size: int) -> None:
    """Append `count` records of `value_size` bytes with flush="sync" (each acknowledged once on
    disk), commit group "etl" at the end, report, and wait to be killed."""
    from commitlog import CommitLog
    log = CommitLog.open(path, segment_size, flush="sync")
    for i in range(count):
        assert log.append(payload(i, value_size)) == i
    log.commit("etl", count)
    report({"acked": count})
    time.sleep(3600)


def payload(offset: int, value_size: int) -> bytes:
    return (b"%08d" % offset * (value_size // 8 + 1))[:value_size]


def record_positions(path: str) -> list[int]:
    """The byte position of every record of the segment file `path`, in order (undamaged)."""
    from commitlog import record as rec
    with open(path, "rb") as f:
        data = f.read()
    out, pos = [], 0
    while True:
        r = rec.decode_at(data, pos, len(data))
        if r.status != rec.OK:
            return out
        out.append(pos)
        pos = r.next_position


def flip(path: str, position: int, xor: int = 0x40) -> None:
    """Flip bits of the byte at `position` of `path` in place."""
    with open(path, "r+b") as f:
        f.seek(position)
        b = f.read(1)[0]
        f.seek(position)
        f.write(bytes([b ^ xor]))


def idle_roller(path: str) -> None:
    """A retention pass's time roll of an idle log (commitlog.timeroll.roll_idle) on "go", then
    again on "again"; reports the outcome and the last segment's size each time."""
    from commitlog import timeroll
    from commitlog.layout import list_segments
    for _ in range(2):
        sys.stdin.readline()
        outcome = timeroll.roll_idle(path, 0.001)
        seg = list_segments(path).segments[-1].path
        report({"rolled": outcome, "size": os.path.getsize(seg)})


def gap_reader(path: str, first: int, end: int) -> None:
    """Open the log read-only; report the offsets a scan returns and what reading each offset in
    [first, end) raises or returns."""
    from commitlog import CommitLog, OffsetRemovedError
    with CommitLog.open(path, readonly=True) as log:
        scanned = [r.offset for r in log.scan()]
        reads = {}
        for offset in range(first, end):
            try:
                reads[offset] = log.read(offset).offset
            except OffsetRemovedError as exc:
                reads[offset] = f"removed, next {exc.next_offset}"
        report({"scanned": scanned, "reads": reads, "end": log.end_offset})
