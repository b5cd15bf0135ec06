"""systemd's notify protocol (sd_notify), without a dependency.

When systemd starts the service with `Type=notify` it sets `NOTIFY_SOCKET` to a datagram socket
(a path, or `@name` in the abstract namespace); the service sends newline-separated `KEY=VALUE`
lines to it: `READY=1` once serving, `RELOADING=1` with `MONOTONIC_USEC=` when a reload starts (then
`READY=1` again), `STOPPING=1` when shutting down, `STATUS=` free text for `systemctl status`, and
`WATCHDOG=1` at least every `WATCHDOG_USEC` microseconds when `WatchdogSec=` is set (we ping at half
of it). Without `NOTIFY_SOCKET` every call is a no-op, so the same code runs outside systemd.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Mapping


class SystemdNotifier:
    """Sends sd_notify messages; thread-safe; never raises (a lost notification is logged by systemd,
    not fatal for us)."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        raw = env.get("NOTIFY_SOCKET") or ""
        self.address: str | bytes | None = None
        if raw.startswith("@"):
            self.address = "\0" + raw[1:]          # abstract namespace
        elif raw.startswith("/"):
            self.address = raw
        self._watchdog_usec = self._parse_watchdog(env)
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None

    @staticmethod
    def _parse_watchdog(env: Mapping[str, str]) -> int | None:
        try:
            usec = int(env.get("WATCHDOG_USEC", ""))
        except ValueError:
            return None
        pid = env.get("WATCHDOG_PID")
        if pid and pid.isdigit() and int(pid) != os.getpid():
            return None                             # meant for another process
        return usec if usec > 0 else None

    @property
    def enabled(self) -> bool:
        return self.address is not None

    @property
    def watchdog_interval(self) -> float | None:
        """Seconds between two WATCHDOG=1 pings (half of WatchdogSec), or None without a watchdog."""
        if not self.enabled or self._watchdog_usec is None:
            return None
        return self._watchdog_usec / 2e6

    def notify(self, *lines: str) -> bool:
        """Send one message made of `lines`; True when sent."""
        if self.address is None:
            return False
        message = "\n".join(lines).encode()
        with self._lock:
            try:
                if self._sock is None:
                    self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                self._sock.sendto(message, self.address)
                return True
            except OSError:
                return False

    def ready(self, status: str | None = None) -> bool:
        return self.notify("READY=1", *([f"STATUS={status}"] if status else []))

    def reloading(self) -> bool:
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.notify("RELOADING=1", f"MONOTONIC_USEC={usec}")

    def stopping(self) -> bool:
        return self.notify("STOPPING=1")

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    def status(self, text: str) -> bool:
        return self.notify(f"STATUS={text}")

    def close(self) -> None:
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None
