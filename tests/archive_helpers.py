"""A real S3 API server on loopback for archive tests: moto's server, a separate process the
tests can stop and kill, and the bucket the tier writes to."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

BUCKET = "archive"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_DEFAULT_REGION": "us-east-1"}


# A command prefix: the child gets SIGKILL when the process (strictly, the thread) that started it
# dies without tearing it down. A prefix, not a preexec_fn: Python code run between fork and exec in
# a process with threads (a Spark driver's) can deadlock on a lock another thread held at the fork.
DIE_WITH_PARENT = ["setpriv", "--pdeathsig", "KILL"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Server:
    """`moto_server` on 127.0.0.1; start(), stop() (SIGKILL), endpoint."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self) -> "S3Server":
        server = Path(sys.executable).with_name("moto_server")
        self.process = subprocess.Popen([*DIE_WITH_PARENT, str(server), "-H", "127.0.0.1", "-p", str(self.port)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        env={**os.environ, **CREDENTIALS})
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(self.endpoint + "/moto-api/", timeout=1).read()
                return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"moto_server did not answer on {self.endpoint}")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)
        self.process = None

    def reset(self) -> None:
        """Forget every bucket and object (moto's reset)."""
        request = urllib.request.Request(self.endpoint + "/moto-api/reset", method="POST")
        urllib.request.urlopen(request, timeout=30).read()

    def make_bucket(self, name: str = BUCKET) -> None:
        import boto3
        boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                     aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                     aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"]).create_bucket(Bucket=name)


class TcpProxy:
    """A TCP proxy on loopback in front of `target_port`, to fail the network between a client
    and a real server: `down()` refuses new connections and cuts open ones, `hang()` accepts and
    never answers (a stuck tier), `cut_after(n)` cuts every connection once it has carried `n`
    bytes towards the server (a request cut mid-body), `hold_after(*patterns)` forwards the first
    request whose bytes hold the last pattern (once requests holding the earlier ones went by, in
    order) and the server's answer, then nothing more towards the server (on any connection, new ones included: the tier hangs right after that request; meant
    for one client doing one request at a time), `up()` forwards
    again. The server keeps its state throughout."""

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.mode = "up"
        self.cut_at: int | None = None
        self.hold_patterns: list[bytes] = []
        self.holding = threading.Event()
        self.held = threading.Event()             # set once hold_after's request was answered
        self._armed = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.mode == "down":
                client.close()
                continue
            self._track(client)
            if self.mode == "hang" or self.holding.is_set():
                continue      # held open, never read nor answered
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            self._track(upstream)
            for a, b, limit, towards in ((client, upstream, self.cut_at, True), (upstream, client, None, False)):
                threading.Thread(target=self._pipe, args=(a, b, limit, towards), daemon=True).start()

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)

    def _pipe(self, src: socket.socket, dst: socket.socket, limit: int | None, towards: bool) -> None:
        carried = 0
        try:
            while data := src.recv(65536):
                if towards and self.holding.is_set():
                    while self.holding.is_set():
                        time.sleep(0.05)  # never forwarded; up() cuts this connection
                    return
                if limit is not None and carried + len(data) > limit:
                    dst.sendall(data[:limit - carried])
                    break                 # cut: both sides are shut down below
                if not towards and self._armed and not data.startswith(b"HTTP/1.1 100"):
                    # Hold before the answer reaches the client: its next request, on any
                    # connection, must find the hold set.
                    self._armed = False
                    self.holding.set()
                    self.held.set()
                if towards and self.hold_patterns and self.hold_patterns[0] in data:
                    # Armed before the request is forwarded: its answer may come back (on the
                    # other pipe's thread) before this thread runs again.
                    self.hold_patterns.pop(0)
                    self._armed = not self.hold_patterns  # hold once the server answered it
                dst.sendall(data)
                carried += len(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _cut(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for s in sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def down(self) -> None:
        self.mode = "down"
        self._cut()

    def hang(self) -> None:
        self.mode = "hang"
        self._cut()

    def hold_after(self, *patterns: bytes) -> None:
        self.hold_patterns, self._armed = list(patterns), False
        self.held.clear()

    def up(self) -> None:
        self.mode, self.cut_at, self.hold_patterns = "up", None, []
        self.holding.clear()
        self._cut()     # hung connections end: their clients retry

    def cut_after(self, nbytes: int) -> None:
        self.mode, self.cut_at = "up", nbytes

    def close(self) -> None:
        self._listener.close()
        self._cut()
