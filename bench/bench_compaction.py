"""Compaction, against baselines measured in the same run (best of interleaved rounds).

1. Compacting a 1 GiB log that is 10 % live (every tenth 1 KiB record kept, the rest marked dead)
   into outputs of eight input segments each, against a bare copy of the same live bytes: walk
   the same segments' headers, CRC-check each live record and copy it into a mapping. Each round
   compacts a fresh copy of the log (copied outside the timing). Target: at least 0.5 of the bare
   copy's MB/s (MB/s over the bytes of the input segments). Prints records/s (records read, and
   records kept) beside MB/s, and the bytes reclaimed.
2. An appender (1 KiB records, flush "async" as deployed) beside a compaction in another process
   throttled to the default 64 MiB/s (bytes read plus written, policies.compaction's
   throttle_delay), against the same appender alone. Target: at least 0.8 of its rate alone.

Every figure says its target, met or missed, and the load average while it ran (the machine is
shared). Keyed compaction (keys per pass, the key index's bytes per key): bench_compaction_keys.py.

Usage: python bench/bench_compaction.py [GiB]   (default 1; the log and one copy go to /tmp)
"""

from __future__ import annotations

import mmap
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zlib

from commitlog import CommitLog
from commitlog import record as rec

ROUNDS = 3
VALUE = 1024
SEG = 64 * 2**20
THROTTLE = 64 * 2**20
APPEND_SECONDS = 3.0


def build(path: str, total: int) -> int:
    n = total // (rec.HEADER_SIZE + VALUE)
    values = [os.urandom(VALUE) for _ in range(1000)]
    with CommitLog.open(path, segment_size=SEG, flush="none", refuse_writes_ratio=None) as log:
        for i in range(0, n, 1000):
            log.append_batch(values[:min(1000, n - i)])
        log.mark_dead(o for o in range(n) if o % 10)
    return n


def bare_copy(paths: list[str], out: str) -> int:
    """The baseline: the live records (offset % 10 == 0), CRC-checked, copied into a mapping."""
    unpack, crc32, total = rec.HEADER.unpack_from, zlib.crc32, 0
    offset = 0
    for path in paths:
        with open(path, "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        size = len(mm) // 9
        fd = os.open(out + os.path.basename(path), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.posix_fallocate(fd, 0, size)
        dst = mmap.mmap(fd, size)
        os.close(fd)
        pos, at, limit = 0, 0, len(mm) - rec.HEADER_SIZE
        while pos <= limit:
            length = unpack(mm, pos)[0]
            if length == 0 or length == rec.END_MARKER:
                break
            nxt = pos + 8 + length
            if offset % 10 == 0:
                if crc32(mm[pos + 8:nxt]) != unpack(mm, pos)[1]:
                    raise ValueError(f"bad record at {pos} of {path}")
                dst[at:at + nxt - pos] = mm[pos:nxt]
                at += nxt - pos
            offset += 1
            pos = nxt
        total += len(mm)
        dst.flush()
        dst.close()
        mm.close()
    return total


def verdict(ratio: float, target: float, *, at_least: bool = True) -> str:
    met = ratio >= target if at_least else ratio <= target
    return f"(target {'>=' if at_least else '<='} {target}: {'met' if met else 'MISSED'})"


def load() -> str:
    return "load average {:.1f} {:.1f} {:.1f} on {} cores".format(*os.getloadavg(), os.cpu_count())


def decide(offset, key, tombstone, marked):
    return "dead" if marked else None


def compact(path: str) -> tuple[int, int, int, int, float]:
    """(bytes of the inputs, bytes reclaimed, records read, records kept, seconds of these
    spent opening the log and listing its segments, its marks read then)."""
    t0 = time.perf_counter()
    with CommitLog.open(path, readonly=True) as log:
        sealed = [s.base_offset for s in log.segments()[:-1]]
        listed = time.perf_counter() - t0
        runs = [sealed[i:i + 8] for i in range(0, len(sealed), 8)]
        outs = log.compact(runs, decide)
    return (sum(o.bytes_before for o in outs), sum(o.bytes_before - o.bytes_after for o in outs),
            sum(o.kept + sum(o.dropped.values()) for o in outs), sum(o.kept for o in outs), listed)


APPENDER = """
import sys, time, os
from commitlog import CommitLog
path, seconds = sys.argv[1], float(sys.argv[2])
v = os.urandom(1024)
with CommitLog.open(path, segment_size=64 * 2**20, refuse_writes_ratio=None) as log:
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(1000):
            log.append(v)
        n += 1000
    print(n / (time.perf_counter() - t0))
"""

COMPACTOR = """
import sys, time
from commitlog import CommitLog
from policies.compaction import throttle_delay
path, rate = sys.argv[1], int(sys.argv[2])
moved, t0 = 0, time.monotonic()
def on_bytes(n):
    global moved
    moved += n
    time.sleep(throttle_delay(moved, time.monotonic() - t0, rate))
with CommitLog.open(path, readonly=True) as log:
    sealed = [s.base_offset for s in log.segments()[:-1]]
    print("ready", flush=True)
    log.compact([sealed[i:i + 8] for i in range(0, len(sealed), 8)],
                lambda o, k, t, m: "dead" if m else None, on_bytes=on_bytes)
"""


def append_rate(workdir: str, source: str | None) -> float:
    """Records/s of an appender alone, or beside a throttled compaction of a copy of `source`."""
    target = os.path.join(workdir, "appended")
    shutil.rmtree(target, ignore_errors=True)
    comp = None
    if source is not None:
        copy = os.path.join(workdir, "throttled")
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(source, copy)
        comp = subprocess.Popen([sys.executable, "-c", COMPACTOR, copy, str(THROTTLE)],
                                stdout=subprocess.PIPE, text=True)
        assert comp.stdout.readline().strip() == "ready"
    rate = float(subprocess.run([sys.executable, "-c", APPENDER, target, str(APPEND_SECONDS)],
                                capture_output=True, text=True, check=True).stdout)
    if comp is not None:
        assert comp.poll() is None, "the compaction ended before the appender: lower the rate"
        comp.kill()
        comp.wait()
    return rate


def main(argv: list[str]) -> int:
    gib = float(argv[0]) if argv else 1.0
    workdir = tempfile.mkdtemp(prefix="bench-compaction-")
    try:
        source = os.path.join(workdir, "source")
        n = build(source, int(gib * 2**30))
        with CommitLog.open(source, readonly=True) as log:
            paths = [s.path for s in log.segments()[:-1]]
        print(f"log: {n} records of {VALUE} bytes, {len(paths)} sealed segments, 10% live")
        best_bare = best_ours = 0.0
        reclaimed = 0
        print(f"before: {load()}")
        for r in range(ROUNDS):
            out = os.path.join(workdir, "bare-")
            t0 = time.perf_counter()
            total = bare_copy(paths, out)
            bare = total / (time.perf_counter() - t0) / 1e6
            for p in os.listdir(workdir):
                if p.startswith("bare-"):
                    os.unlink(os.path.join(workdir, p))
            copy = os.path.join(workdir, "copy")
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(source, copy)
            t0 = time.perf_counter()
            inputs, reclaimed, records, kept, listed = compact(copy)
            took = time.perf_counter() - t0
            ours = inputs / took / 1e6
            shutil.rmtree(copy)
            print(f"round {r}: compaction {ours:.0f} MB/s ({took:.2f} s, {listed:.2f} s of it "
                  f"opening the log and listing its segments), bare copy {bare:.0f} MB/s")
            best_bare, best_ours = max(best_bare, bare), max(best_ours, ours)
        ratio = best_ours / best_bare
        per_mb = records / (inputs / 1e6)
        print(f"FIGURE compaction of a 10%-live log: {best_ours:.0f} MB/s vs bare copy "
              f"{best_bare:.0f} MB/s = {ratio:.2f} {verdict(ratio, 0.5)}; {load()}")
        print(f"FIGURE compaction of a 10%-live log in records: {best_ours * per_mb / 1e6:.2f} M "
              f"records/s read ({records:,}), {best_ours * per_mb * kept / records / 1e3:.0f} k/s "
              f"kept, vs bare copy {best_bare * per_mb / 1e6:.2f} M/s (no target of its own); "
              f"reclaimed {reclaimed / 2**20:.0f} MiB of {inputs / 2**20:.0f} MiB")
        alone = beside = 0.0
        for r in range(ROUNDS):
            a = append_rate(workdir, None)
            b = append_rate(workdir, source)
            print(f"round {r}: appender alone {a:.0f} rec/s, beside a compaction {b:.0f} rec/s")
            alone, beside = max(alone, a), max(beside, b)
        print(f"FIGURE appender beside a compaction throttled to 64 MiB/s: {beside:.0f} vs "
              f"{alone:.0f} rec/s alone = {beside / alone:.2f} {verdict(beside / alone, 0.8)}; "
              f"{load()}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
