"""The archive tier, against baselines measured in the same run (best of interleaved rounds).

1. Upload: a log's sealed segments archived by the store's upload (each object hashed, put with
   its checksums, the stored digest compared, the manifest rewritten per segment), against a bare
   boto3 `put_object` of the same files, to the same S3 API server (moto's, on loopback; emptied
   between rounds, as it keeps objects in memory). Target: at least 0.8 of the bare upload's MB/s. Also for a directory tier (`file://`), against a bare
   copy of the same files with an fsync each.
2. Reads: a scan of the archived log through `open_archive` (every object checked against its
   manifest entry, ranges fetched ahead in parallel, every record's CRC), from S3 against a bare
   boto3 `get_object` loop over the same objects whole, one after the other, and from the directory
   tier against plain reads of the same files whole (MB/s of record values read; the baselines
   MB/s of object bytes). Target: 1.5 × each baseline. Also against a scan of the same log on the
   local disk (no target).
3. Clients (how the S3 client was chosen): a 64 MiB object put and read back whole and in 1 MiB
   ranges with boto3, pyarrow's S3FileSystem and obstore (each when installed), against the
   same server.

Every figure is printed with its target, met or missed, and the load average before and after.

Usage: python bench/bench_archive.py [MiB]   (default 256: the log's size; 16 MiB segments)
Needs the `archive` and `test` extras (boto3, moto).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from commitlog import CommitLog
from commitlog.archive import LogArchive, open_archive, open_tier, upload_sealed

# After the packages are imported: tests/commitlog would shadow the package as a namespace.
sys.path.append(str(Path(__file__).resolve().parents[1] / "tests"))
from archive_helpers import BUCKET, CREDENTIALS, S3Server  # noqa: E402

ROUNDS = 3
SEG = 16 << 20
VALUE = 4096
MiB = 1 << 20


def build(path: str, total: int) -> list:
    values = [os.urandom(VALUE) for _ in range(256)]
    with CommitLog.open(path, segment_size=SEG, flush="none", refuse_writes_ratio=None) as log:
        while sum(s.used_bytes for s in log.segments()[:-1]) < total:
            log.append_batch(values)
        return [s for s in log.segments() if not s.active]


def best(rounds: list[float]) -> float:
    return max(rounds)


def report(what: str, ours: list[float], bare: list[float], target: float | None, baseline: str) -> None:
    ratio = best(ours) / best(bare)
    verdict = "no target" if target is None else f"target >= {target}: {'met' if ratio >= target else 'MISSED'}"
    print(f"{what:22}: {best(ours):7.1f}  {baseline} {best(bare):7.1f}  ratio {ratio:.2f} ({verdict})  "
          f"rounds {[round(x) for x in ours]} / {[round(x) for x in bare]}")


def upload_rounds(path: str, sealed: list, server: S3Server, tmp: str) -> dict[str, list[float]]:
    import boto3
    client = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1")
    nbytes = sum(s.used_bytes for s in sealed)
    out: dict[str, list[float]] = {k: [] for k in ("store s3", "bare s3", "store file", "bare file")}
    for r in range(ROUNDS):
        archive = LogArchive(open_tier(f"s3://{BUCKET}/store{r}", endpoint=server.endpoint, region="us-east-1"), path)
        archive.forget()        # each round's tier is a new one: the log meets it as new
        t = time.perf_counter()
        upload_sealed(archive, sealed, now_ms=0)
        out["store s3"].append(nbytes / MiB / (time.perf_counter() - t))
        t = time.perf_counter()
        for s in sealed:
            with open(s.path, "rb") as f:
                client.put_object(Bucket=BUCKET, Key=f"bare{r}/{os.path.basename(s.path)}", Body=f.read(s.used_bytes))
            with open(s.path[:-4] + ".index", "rb") as f:
                client.put_object(Bucket=BUCKET, Key=f"bare{r}/{os.path.basename(s.path)[:-4]}.index", Body=f.read())
        out["bare s3"].append(nbytes / MiB / (time.perf_counter() - t))
        if r < ROUNDS - 1:      # the server keeps objects in memory: the next round starts as empty
            for prefix in (f"store{r}/", f"bare{r}/"):
                for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
                    for item in page.get("Contents", ()):
                        client.delete_object(Bucket=BUCKET, Key=item["Key"])
        archive = LogArchive(open_tier(f"file://{tmp}/store{r}"), path)
        archive.forget()
        t = time.perf_counter()
        upload_sealed(archive, sealed, now_ms=0)
        out["store file"].append(nbytes / MiB / (time.perf_counter() - t))
        t = time.perf_counter()
        os.makedirs(f"{tmp}/bare{r}")
        for s in sealed:
            for src in (s.path, s.path[:-4] + ".index"):
                dst = f"{tmp}/bare{r}/{os.path.basename(src)}"
                shutil.copyfile(src, dst)
                fd = os.open(dst, os.O_RDONLY)
                os.fsync(fd)
                os.close(fd)
        out["bare file"].append(nbytes / MiB / (time.perf_counter() - t))
    return out


def read_rounds(path: str, server: S3Server, tmp: str) -> dict[str, list[float]]:
    import boto3
    client = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1")
    prefix = f"store{ROUNDS - 1}/{os.path.basename(path)}/"
    keys = [item["Key"] for item in client.list_objects_v2(Bucket=BUCKET, Prefix=prefix)["Contents"]
            if item["Key"].endswith(".log")]
    files = [f"{tmp}/store0/{key.split('/', 1)[1]}" for key in keys]     # the directory tier's copies
    out: dict[str, list[float]] = {k: [] for k in ("local", "archive file", "archive s3", "bare s3 get",
                                                   "bare file read")}
    for _ in range(ROUNDS):
        t = time.perf_counter()
        got = sum(len(client.get_object(Bucket=BUCKET, Key=key)["Body"].read()) for key in keys)
        out["bare s3 get"].append(got / MiB / (time.perf_counter() - t))
        t = time.perf_counter()
        got = 0
        for name in files:
            with open(name, "rb") as f:
                got += len(f.read())
        out["bare file read"].append(got / MiB / (time.perf_counter() - t))
        with CommitLog.open(path, readonly=True) as log:
            end = max(s.end_offset for s in log.segments()[:-1])
            t = time.perf_counter()
            nbytes = sum(len(r.value) for r in log.scan(0, end))
            out["local"].append(nbytes / MiB / (time.perf_counter() - t))
        for name, url, endpoint in (("archive file", f"file://{tmp}/store0", None),
                                    ("archive s3", f"s3://{BUCKET}/store{ROUNDS - 1}", server.endpoint)):
            with open_archive(url, os.path.basename(path), endpoint=endpoint, region="us-east-1") as log:
                t = time.perf_counter()
                got = sum(len(r.value) for r in log.scan())
                assert got == nbytes, (name, got, nbytes)
                out[name].append(nbytes / MiB / (time.perf_counter() - t))
    return out


def client_rounds(server: S3Server) -> dict[str, list[float]]:
    """MB/s of put + whole get + 64 range gets of one 64 MiB object, per client."""
    import boto3
    data = os.urandom(64 * MiB)
    host = server.endpoint.split("//")[1]
    clients = {}
    s3 = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1")

    def with_boto3(key):
        s3.put_object(Bucket=BUCKET, Key=key, Body=data)
        assert len(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()) == len(data)
        for i in range(64):
            s3.get_object(Bucket=BUCKET, Key=key, Range=f"bytes={i * MiB}-{(i + 1) * MiB - 1}")["Body"].read()
    clients["boto3"] = with_boto3
    try:
        from pyarrow import fs
        arrow = fs.S3FileSystem(access_key=CREDENTIALS["AWS_ACCESS_KEY_ID"], secret_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                                endpoint_override=host, scheme="http", region="us-east-1")

        def with_pyarrow(key):
            with arrow.open_output_stream(f"{BUCKET}/{key}") as out:
                out.write(data)
            with arrow.open_input_file(f"{BUCKET}/{key}") as f:
                assert len(f.read()) == len(data)
                for i in range(64):
                    f.read_at(MiB, i * MiB)
        clients["pyarrow"] = with_pyarrow
    except ImportError:
        pass
    try:
        import obstore
        from obstore.store import S3Store
        store = S3Store(BUCKET, endpoint=server.endpoint, region="us-east-1", client_options={"allow_http": True},
                        access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                        secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"])

        def with_obstore(key):
            obstore.put(store, key, data)
            assert len(obstore.get(store, key).bytes()) == len(data)
            for i in range(64):
                obstore.get_range(store, key, start=i * MiB, end=(i + 1) * MiB)
        clients["obstore"] = with_obstore
    except ImportError:
        pass
    out: dict[str, list[float]] = {name: [] for name in clients}
    for r in range(ROUNDS):
        for name, run in clients.items():
            t = time.perf_counter()
            run(f"clients/{name}{r}")
            out[name].append(3 * 64 / (time.perf_counter() - t))
    return out


def main() -> None:
    total = int(sys.argv[1]) * MiB if len(sys.argv) > 1 else 256 * MiB
    os.environ.update(CREDENTIALS)
    server = S3Server().start()
    server.make_bucket()
    tmp = tempfile.mkdtemp(prefix="bench-archive-")
    try:
        path = os.path.join(tmp, "log")
        sealed = build(path, total)
        print(f"log: {len(sealed)} sealed segments, {sum(s.used_bytes for s in sealed) / MiB:.0f} MiB; "
              f"{ROUNDS} interleaved rounds, best of each (MB/s); load average {os.getloadavg()[0]:.1f} "
              f"on {os.cpu_count()} CPUs")
        up = upload_rounds(path, sealed, server, tmp)
        for kind in ("s3", "file"):
            report(f"upload to {kind}", up[f"store {kind}"], up[f"bare {kind}"], 0.8,
                   "bare put_object" if kind == "s3" else "bare copy + fsync")
        reads = read_rounds(path, server, tmp)
        report("scan from archive s3", reads["archive s3"], reads["bare s3 get"], 1.5, "bare get_object loop")
        report("scan from archive file", reads["archive file"], reads["bare file read"], 1.5, "plain file reads")
        for name in ("archive s3", "archive file"):
            report(f"scan from {name}", reads[name], reads["local"], None, "local scan")
        clients = client_rounds(server)
        for name, rounds in clients.items():
            print(f"client {name:8}: put + get + 64 range gets of 64 MiB: {best(rounds):6.1f} MB/s "
                  f"(rounds {[round(x) for x in rounds]}; no target)")
        print(f"load average at the end {os.getloadavg()[0]:.1f}")
    finally:
        server.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
