"""How a cluster write's task should stage its rows (docs/spark-cluster.md): through a private
local log, sealed and uploaded (`commitlog.spark.cluster.staging.stage`, today's code), or straight
to the tier from memory. No Spark: one task's work, in one process.

One task's share of the cluster bench's rows (BENCH_ROWS / 4 rows of bigint, double, 16-character
string, in Arrow batches of 10,000 rows as Spark hands them) is encoded once into the records a
task appends (`cluster_writer.encoded`, 4 MiB each). Then, in interleaved rounds, per tier:

- `staged`: `stage(tier, ...)` end to end: the records appended to a private log in a temporary
  directory (TMPDIR, the machine's disk here), sealed, each segment and index uploaded and
  verified by the tier, the log removed;
- `kept`: the same, but as a cluster write runs it: the private log in the log's local directory
  (on the same disk), each uploaded segment renamed to its cache copy instead of removed (the
  copies are removed after the timed section);
- `memory`: the alternative's lower bound: the very objects `staged` produced (read back once
  beforehand) put by the same tier's `put` from a BytesIO, nothing else: building the segment
  frames in memory, which the alternative would also need, is not counted.

Tiers: a directory on the disk, a directory on a tmpfs (/dev/shm), moto's S3 server on loopback
(emptied between rounds). Each figure: the median round (best beside), MB/s of staged bytes, the
ratio memory/staged (1.0: the local log costs nothing) and the local log's cost per task.

With `--profile`: instead, a cProfile of one `stage` on the directory on disk (after one to warm
up), and the time the commit's check of its objects takes on the driver (`commit.check_staged`: a
directory tier's head reads and hashes the object).

Environment: BENCH_ROWS (default 5000000: a task stages a quarter), BENCH_ROUNDS (5), BENCH_DIR.
"""

from __future__ import annotations

import io
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid

import pyarrow as pa

ROWS = int(os.environ.get("BENCH_ROWS", 5_000_000))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", 5))
TASKS = 4
SEGMENT = 64 << 20

from commitlog.archive import local_copies, open_tier  # noqa: E402
from commitlog.spark.cluster.cluster_writer import encoded  # noqa: E402
from commitlog.spark.cluster.staging import stage  # noqa: E402
from commitlog.spark.schema import record_key  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from archive_helpers import BUCKET, CREDENTIALS, S3Server  # noqa: E402


def task_records(rows: int) -> list[tuple[memoryview, bytes]]:
    """One task's records, encoded as a cluster write's task encodes them."""
    import hashlib
    ids = pa.array(range(rows), pa.int64())
    xs = pa.array([(i * 2654435761 % 1000003) / 1000003 for i in range(rows)], pa.float64())
    ss = pa.array([hashlib.sha256(str(i).encode()).hexdigest()[:16] for i in range(rows)])
    table = pa.table({"k": ids, "x": xs, "s": ss})
    key = record_key(uuid.uuid4().hex)
    return [(memoryview(blob), key)
            for blob, _ in encoded(table.to_batches(max_chunksize=10_000), table.schema, 4 << 20, SEGMENT - 85)]


def empty(tier, name: str) -> None:
    for key in list(tier.keys(f"{name}/")):
        tier.delete(key)


def staged_objects(tier, name: str, records) -> list[tuple[str, bytes]]:
    """The objects one `stage` puts, in memory."""
    done = stage(tier, name, "probe", "a0", SEGMENT, records)
    objects = [(k, tier.read(f"{name}/{k}")) for s in done for k in (s.key, s.index_key)]
    empty(tier, name)
    return objects


def kept(tier, name: str, n: int, records) -> float:
    """Seconds of one `stage` that keeps its segments as copies in a local directory (removed after)."""
    directory = tempfile.mkdtemp(prefix="bench-staging-copies-", dir=os.environ.get("BENCH_DIR"))
    try:
        local_copies.mark(directory, tier.url, getattr(tier, "endpoint", None), None, name)
        t0 = time.perf_counter()
        stage(tier, name, f"kept{n}", "staged", SEGMENT, records, directory)
        return time.perf_counter() - t0
    finally:
        shutil.rmtree(directory)


def rounds(tiers: dict, records) -> dict[str, list[float]]:
    name = "staging"
    objects = {label: staged_objects(tier, name, records) for label, tier in tiers.items()}
    samples: dict[str, list[float]] = {}
    for n in range(ROUNDS + 1):                    # round 0 warms up, not counted
        for label, tier in tiers.items():
            t0 = time.perf_counter()
            stage(tier, name, f"job{n}", "staged", SEGMENT, records)
            staged = time.perf_counter() - t0
            copies = kept(tier, name, n, records)
            t0 = time.perf_counter()
            for key, body in objects[label]:
                tier.put(f"{name}/mem{n}/{key}", io.BytesIO(body), len(body))
            memory = time.perf_counter() - t0
            empty(tier, name)
            if n:
                samples.setdefault(f"{label} staged", []).append(staged)
                samples.setdefault(f"{label} kept", []).append(copies)
                samples.setdefault(f"{label} memory", []).append(memory)
        if n:
            print(f"round {n}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in samples.items()), flush=True)
    return {"samples": samples, "bytes": {k: sum(len(b) for _, b in v) for k, v in objects.items()},
            "count": {k: len(v) for k, v in objects.items()}}


def report(result: dict, tiers) -> None:
    samples = result["samples"]
    for label in tiers:
        staged, memory = samples[f"{label} staged"], samples[f"{label} memory"]
        size, count = result["bytes"][label], result["count"][label]
        ws, wm = statistics.median(staged), statistics.median(memory)
        ratio = statistics.median(m / s for m, s in zip(memory, staged))
        best = max(m / s for m, s in zip(memory, staged))
        print(f"FIGURE cluster_staging_{label.replace(' ', '_')} staged {size / ws / 1e6:.0f} MB/s "
              f"({ws:.2f} s, {count} objects, {size / 2**20:.0f} MiB) "
              f"baseline=memory_put:{size / wm / 1e6:.0f} MB/s "
              f"({wm:.2f} s) ratio={ratio:.2f} best={best:.2f} local_log_cost={ws - wm:.2f} s per task")
        wk = statistics.median(samples[f"{label} kept"])
        print(f"FIGURE cluster_staging_{label.replace(' ', '_')}_kept staged_keeping_copies "
              f"{size / wk / 1e6:.0f} MB/s ({wk:.2f} s) baseline=memory_put:{size / wm / 1e6:.0f} MB/s "
              f"ratio={statistics.median(m / k for m, k in zip(memory, samples[f'{label} kept'])):.2f} "
              f"local_log_cost={wk - wm:.2f} s per task")


def profile(tier, records) -> None:
    import cProfile
    import pstats
    from commitlog.spark.cluster.commit import check_staged
    stage(tier, "staging", "warm", "a0", SEGMENT, records)
    profiler = cProfile.Profile()
    t0 = time.perf_counter()
    profiler.runcall(stage, tier, "staging", "profiled", "a0", SEGMENT, records)
    print(f"one stage (profiled): {time.perf_counter() - t0:.3f} s")
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
    done = stage(tier, "staging", "checked", "a0", SEGMENT, records)
    t0 = time.perf_counter()
    check_staged(tier, "staging", "checked", done)
    print(f"the commit's check of one task's {2 * len(done)} objects: {time.perf_counter() - t0:.3f} s")


def main() -> int:
    os.environ.update(CREDENTIALS)
    rows = ROWS // TASKS
    t0 = time.perf_counter()
    records = task_records(rows)
    print(f"{rows} rows in {len(records)} records of {sum(len(v) for v, _ in records) / 2**20:.0f} MiB "
          f"(encoded in {time.perf_counter() - t0:.1f} s), private logs in {tempfile.gettempdir()}", flush=True)
    server = S3Server().start()
    server.make_bucket()
    disk = tempfile.mkdtemp(prefix="bench-staging-", dir=os.environ.get("BENCH_DIR"))
    shm = tempfile.mkdtemp(prefix="bench-staging-", dir="/dev/shm")
    try:
        tiers = {"directory disk": open_tier(f"file://{disk}"), "directory tmpfs": open_tier(f"file://{shm}"),
                 "s3": open_tier(f"s3://{BUCKET}/bench", endpoint=server.endpoint, region="us-east-1")}
        if "--profile" in sys.argv[1:]:
            profile(tiers["directory disk"], records)
        else:
            report(rounds(tiers, records), tiers)
        print(f"load average: {open('/proc/loadavg').read().strip()}")
        return 0
    finally:
        server.kill()
        shutil.rmtree(disk, ignore_errors=True)
        shutil.rmtree(shm, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
