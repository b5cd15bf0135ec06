"""500 connections that connect and send nothing (every slot of the default
`service.max_connections`) against a real sidecar: the probes and a scrape are still answered at
once, because a new connection at the limit closes the longest-idle one instead of waiting in the
listen backlog until `http_timeout` (here 60 s) sweeps them."""

from __future__ import annotations

import socket
import time

import pytest

from http_helpers import address, get_timed, raise_open_files, reserved_log_sidecar

IDLE = 500          # the default service.max_connections
BOUND = 2.0         # seconds: a correctness bound under a loaded machine, not a benchmark


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory):
    raise_open_files(IDLE + 256)
    s, _ = reserved_log_sidecar(tmp_path_factory.mktemp("idle"), service={"http_timeout": "60s"})
    with s:
        s.wait_ready()
        yield s


def _open_idle(sidecar, count: int) -> list[socket.socket]:
    sockets = []
    for _ in range(count):
        s = socket.create_connection(address(sidecar), timeout=10)
        s.setblocking(False)
        sockets.append(s)
    return sockets


def _closed(sockets: list[socket.socket]) -> int:
    closed = 0
    for s in sockets:
        try:
            closed += s.recv(1) == b""
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
    return closed


def test_probes_and_metrics_answer_within_2s_while_500_idle_connections_hold_every_slot(sidecar):
    idle = _open_idle(sidecar, IDLE)
    try:
        time.sleep(0.5)                   # the sidecar has accepted them all: every slot is taken
        assert _closed(idle) == 0
        took = {}
        for round_ in range(5):
            for path in ("/healthz", "/readyz", "/metrics", "/status"):
                status, seconds = get_timed(sidecar, path, timeout=30)
                assert status == 200, path
                took[path, round_] = seconds
        slow = {key: round(t, 2) for key, t in took.items() if t > BOUND}
        assert not slow, f"answers slower than {BOUND}s with {IDLE} idle connections: {slow}"
        # room was made by closing idle connections, one per new connection, not all of them
        assert 1 <= _closed(idle) <= len(took) + 5
        assert sidecar.proc.poll() is None
    finally:
        for s in idle:
            s.close()
    assert "closed 1 idle connection to accept new ones" in sidecar.log()

