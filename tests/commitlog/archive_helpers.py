"""A real S3 API server on loopback for archive tests: moto's server, a separate process the
tests can stop and kill, and the bucket the tier writes to."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

BUCKET = "archive"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_DEFAULT_REGION": "us-east-1"}


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
        self.process = subprocess.Popen([str(server), "-H", "127.0.0.1", "-p", str(self.port)],
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

    def make_bucket(self, name: str = BUCKET) -> None:
        import boto3
        boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1").create_bucket(
            Bucket=name)
