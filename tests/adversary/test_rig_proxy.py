"""The tier proxy's rig: `TcpProxy.hold_after` must stop the request right after the one it names,
however fast the server answers. The cluster tests hold a second driver there ("listed the
manifest versions, about to create version 1"); a proxy that armed its hold only after forwarding
the named request let a quick answer through unheld, so the next request (the create) went by and
the test saw the other driver's job land first."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import archive_helpers
from archive_helpers import DIE_WITH_PARENT, TcpProxy

# A server in its own process that answers each request at once, on a kept-alive connection, and
# prints each request line it got.
SERVER = r"""
import socket, sys, threading
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
def serve(conn):
    buffer = b""
    with conn:
        while True:
            while b"\r\n\r\n" not in buffer:
                data = conn.recv(65536)
                if not data:
                    return
                buffer += data
            head, buffer = buffer.split(b"\r\n\r\n", 1)
            print(head.split(b"\r\n")[0].decode(), flush=True)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
while True:
    conn, _ = listener.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""

ROUNDS = 5


class _SlowForwarding:
    """A connection to the server whose forwarding thread is descheduled right after each send
    (as under load): the server's answer comes back before that thread runs again."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def sendall(self, data: bytes) -> None:
        self._sock.sendall(data)
        time.sleep(0.05)

    def __getattr__(self, name):
        return getattr(self._sock, name)


class _ProxySocketModule:
    """The `socket` module as the proxy sees it: its connections to the server forward slowly."""

    def __init__(self, connect) -> None:
        self._connect = connect

    def create_connection(self, *args, **kwargs):
        return _SlowForwarding(self._connect(*args, **kwargs))

    def __getattr__(self, name):
        return getattr(socket, name)


ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def _ask(sock: socket.socket, path: str) -> bytes:
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    got = b""
    while len(got) < len(ANSWER):
        data = sock.recv(65536)
        if not data:
            break
        got += data
    return got


def test_the_request_after_the_named_one_never_reaches_the_server(monkeypatch):
    connect = socket.create_connection
    monkeypatch.setattr(archive_helpers, "socket", _ProxySocketModule(connect))
    server = subprocess.Popen([*DIE_WITH_PARENT, sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        through = []
        for round_ in range(ROUNDS):
            proxy = TcpProxy(port)
            proxy.hold_after(b"/claim", b"list-type=2")
            try:
                with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as sock:
                    assert _ask(sock, f"/claim?{round_}") == ANSWER
                    assert _ask(sock, f"/?list-type=2&{round_}") == ANSWER
                    sock.settimeout(0.5)
                    try:
                        answer = _ask(sock, f"/create?{round_}")
                    except TimeoutError:
                        answer = b""
                    assert proxy.held.is_set()
                    if answer:
                        through.append(round_)
            finally:
                proxy.close()
            # Every line the server printed so far: the last two of this round, never the create.
            seen = [server.stdout.readline().strip() for _ in range(2)]
            assert seen == [f"GET /claim?{round_} HTTP/1.1", f"GET /?list-type=2&{round_} HTTP/1.1"], seen
        assert through == [], f"the held request was answered in rounds {through}"
    finally:
        server.kill()
        server.wait(10)
