"""A scan of an archived log from S3 through a link that limits each connection's speed, as a
remote store's network does (moto's server on loopback answers as fast as two cores let it, where
one connection to a store over a network carries a fraction of what several do).

The link: a TCP proxy on loopback in front of moto's server, pacing what the server sends on each
connection to `RATE` bytes/s. Measured through it, interleaved rounds, best of each: a scan through
`open_archive` (every object checked whole, ranges fetched ahead in parallel, every record's CRC;
MB/s of record values) against boto3's `get_object` of the same objects whole, one after the other
(MB/s of object bytes). Target: 1.5 ×.

Usage: python bench/bench_archive_link.py [MiB] [MiB/s per connection]   (default 128, 32)
Needs the `archive` and `test` extras (boto3, moto).
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

from commitlog.archive import LogArchive, open_archive, open_tier, upload_sealed

sys.path.append(str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parents[1] / "tests"))
from archive_helpers import BUCKET, CREDENTIALS, S3Server  # noqa: E402
from bench_archive import MiB, best, build, report  # noqa: E402

ROUNDS = 3
_IDLE = 0.05                 # a connection quiet this long starts its pacing anew (the next answer)


class PacedLink:
    """A TCP proxy on 127.0.0.1 to `target_port`, each connection's answers paced to `rate` bytes/s."""

    def __init__(self, target_port: int, rate: float) -> None:
        self.target, self.rate = ("127.0.0.1", target_port), rate
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            client, _ = self._listener.accept()
            server = socket.create_connection(self.target)
            threading.Thread(target=self._pump, args=(client, server, None), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, self.rate), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, rate: float | None) -> None:
        start, sent, last = time.monotonic(), 0, 0.0
        try:
            while data := source.recv(1 << 16):
                now = time.monotonic()
                if now - last > _IDLE:
                    start, sent = now, 0
                sink.sendall(data)
                sent += len(data)
                last = time.monotonic()
                if rate is not None and sent / rate > last - start:
                    time.sleep(sent / rate - (last - start))
                    last = time.monotonic()
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def main() -> None:
    total = int(sys.argv[1]) * MiB if len(sys.argv) > 1 else 128 * MiB
    rate = float(sys.argv[2]) * MiB if len(sys.argv) > 2 else 32 * MiB
    os.environ.update(CREDENTIALS)
    server = S3Server().start()
    server.make_bucket()
    tmp = tempfile.mkdtemp(prefix="bench-archive-link-")
    try:
        import boto3
        path = os.path.join(tmp, "log")
        sealed = build(path, total)
        upload_sealed(LogArchive(open_tier(f"s3://{BUCKET}/a", endpoint=server.endpoint, region="us-east-1"),
                                 path), sealed, now_ms=0)
        link = PacedLink(server.port, rate)
        client = boto3.client("s3", endpoint_url=link.endpoint, region_name="us-east-1")
        keys = [f"a/log/{os.path.basename(s.path)}" for s in sealed]
        print(f"log: {len(sealed)} sealed segments, {sum(s.used_bytes for s in sealed) / MiB:.0f} MiB; a link of "
              f"{rate / MiB:.0f} MiB/s per connection; {ROUNDS} interleaved rounds, best of each (MB/s); "
              f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        ours: list[float] = []
        bare: list[float] = []
        for _ in range(ROUNDS):
            t = time.perf_counter()
            got = sum(len(client.get_object(Bucket=BUCKET, Key=key)["Body"].read()) for key in keys)
            bare.append(got / MiB / (time.perf_counter() - t))
            with open_archive(f"s3://{BUCKET}/a", "log", endpoint=link.endpoint, region="us-east-1") as log:
                t = time.perf_counter()
                got = sum(len(r.value) for r in log.scan())
                ours.append(got / MiB / (time.perf_counter() - t))
        report("scan through the link", ours, bare, 1.5, "bare get_object loop")
        print(f"load average at the end {os.getloadavg()[0]:.1f}")
    finally:
        server.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
