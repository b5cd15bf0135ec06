"""A real `retention serve` subprocess for the service tests: start, talk HTTP, signal, stop."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from email.message import Message
from pathlib import Path

from other_user_helpers import as_user as user_prefix
from retention.web.admission import CLIENT_HEADER

_URL = re.compile(r"HTTP on (http://\S+) ")


class Sidecar:
    """`python -m retention.cli serve --config PATH` with stderr in a file (read with `log()`).

    The configuration should listen on port 0; the real URL is read from the start-up line. With
    `as_user` (a uid; run as root), it runs as that user and group, without supplementary groups
    (setpriv): `cwd`, the configuration and the code must be readable by it."""

    def __init__(self, config_path: Path, *, cwd: Path, env: dict | None = None, as_user: int | None = None) -> None:
        self.user_prefix = [] if as_user is None else user_prefix(as_user)
        self.config_path = Path(config_path)
        self.cwd = Path(cwd)
        self.stderr_path = self.cwd / f"sidecar-{os.getpid()}-{time.monotonic_ns()}.log"
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen | None = None
        self.url: str | None = None

    def start(self, *, timeout: float = 20.0) -> Sidecar:
        self._stderr = open(self.stderr_path, "w")
        self.proc = subprocess.Popen(
            [*self.user_prefix, sys.executable, "-m", "retention.cli", "serve", "--config", str(self.config_path)],
            cwd=self.cwd, stdout=subprocess.DEVNULL, stderr=self._stderr, env=self.env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = _URL.search(self.log())
            if match:
                self.url = match.group(1)
                return self
            if self.proc.poll() is not None:
                raise AssertionError(f"retention serve exited {self.proc.returncode}:\n{self.log()}")
            time.sleep(0.05)
        raise AssertionError(f"retention serve did not start in {timeout}s:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.stderr_path.read_text()
        except FileNotFoundError:
            return ""

    # ------------------------------------------------------------------ HTTP
    def request(self, method: str, path: str, *, headers: dict | None = None,
                timeout: float = 30.0) -> tuple[int, Message, bytes]:
        """(status, headers (looked up in any case, as HTTP names are), body). A POST sends the
        header the sidecar requires of state changes (`CLIENT_HEADER`) unless `headers` sets it."""
        if method == "POST":
            headers = {CLIENT_HEADER: "tests", **(headers or {})}
        req = urllib.request.Request(self.url + path, method=method, headers=headers or {},
                                     data=b"" if method == "POST" else None)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as response:
                return response.status, response.headers, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers, exc.read()

    def get_json(self, path: str) -> tuple[int, dict]:
        status, _, body = self.request("GET", path)
        return status, json.loads(body)

    def wait_for(self, predicate, *, timeout: float = 20.0, interval: float = 0.1, what: str = "condition"):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = predicate()
            if last:
                return last
            time.sleep(interval)
        raise AssertionError(f"timed out waiting for {what} (last: {last!r})\n--- sidecar log ---\n{self.log()}")

    def wait_ready(self, timeout: float = 20.0) -> None:
        self.wait_for(lambda: self.request("GET", "/readyz")[0] == 200, timeout=timeout, what="/readyz 200")

    # ------------------------------------------------------------------ process
    def send(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout=timeout)

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._stderr.close()
        return self.proc.returncode

    def __enter__(self) -> Sidecar:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
