"""The sidecar's HTTP server: waitress serving `RetentionApp` (`retention/web/routes.py`) on `service.listen`.

Endpoints: GET /healthz, /readyz, /livez, /metrics, /status, /plan, /openapi.json (the OpenAPI 3.1
document of them all, retention/web/openapi.py);
POST /clean, /compact, /clock/accept. Only the POSTs change anything; every request passes
admission first (`retention/web/admission.py`: Host, then for state changes a header no page of
another origin can send and the token when service.token is set). /status, /plan and /metrics are
shared for a second between clients (`routes.VIEW_TTL`). No client can hold it: one I/O thread
multiplexes every connection, `WORKER_THREADS` answer requests and the probes have their own lane
(`PROBE_THREADS`); idle or trickling connections are closed after `service.http_timeout` and, at
`service.max_connections`, the longest-idle one makes room (`BACKLOG` past that); requests are
bounded (`MAX_HEADER_BYTES`, `MAX_BODY_BYTES`); SIGPIPE is ignored in `serve`. Every refusal is
counted and logged at DEBUG. Each endpoint's answers, the limits and why: docs, HTTP API and
Security.

`RetentionHTTPServer` is thread-safe: `update()` and `stop()` may be called from any thread.
"""

from __future__ import annotations

import logging
import resource
import threading
import time

from loguru import logger
from waitress import wasyncore
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.server import TcpWSGIServer
from waitress.task import ErrorTask, ThreadedTaskDispatcher

from policies import ServiceConfig, plural

from .routes import ENDPOINTS, OTHER, PROBE_PATHS, RetentionApp
from ..scheduling.scheduler import RetentionScheduler

__all__ = ["ENDPOINTS", "RetentionHTTPServer"]

# Requests run here. The costly views are shared, and under the GIL more threads add no throughput,
# only more hand-offs a probe waits through (4 threads: /healthz p99 66 ms under the load test, 2: 20-30 ms).
WORKER_THREADS = 2
PROBE_THREADS = 1           # /livez, /healthz and /readyz only: answered from state already in memory
MAX_HEADER_BYTES = 64 * 1024    # request line plus headers; a scraper sends well under 1 KiB
MAX_BODY_BYTES = 64 * 1024      # no endpoint reads a body
BACKLOG = 1024              # the kernel caps it at net.core.somaxconn
_FD_SPARE = 128             # file descriptors kept for logs, segments, the audit trail
# waitress warns at every request that waits for a worker: under a scrape burst, a flood of lines.
logging.getLogger("waitress.queue").setLevel(logging.ERROR)
EVICTION_LOG_INTERVAL = 60.0  # seconds between WARNINGs about connections closed at the limit
_OWN_SOCKETS = 2            # waitress counts its listening socket and its wake-up pipe as connections


class _ErrorTask(ErrorTask):
    """waitress's answer to a request it could not parse (400, 413, 431, 501): counted and logged."""

    def execute(self) -> None:
        error, request = self.request.error, self.request
        app: RetentionApp = self.channel.server.retention_app
        # refused before routing: its path (absent or defaulted when the parse failed) is no label
        app.refused(_client(self.channel), getattr(request, "command", None) or "-",
                    getattr(request, "path", None) or "-", error.code,
                    error.reason + (f": {error.body}" if error.body else ""), count=False)
        app.count(OTHER, error.code)
        super().execute()


class _Channel(HTTPChannel):
    """One connection; remembers since when a request has been arriving, to close slow senders."""

    error_task_class = _ErrorTask
    partial_since: float | None = None

    def received(self, data: bytes) -> bool:
        result = super().received(data)
        if self.request is None:
            self.partial_since = None
        elif self.partial_since is None:
            self.partial_since = time.time()
        return result


class _Server(TcpWSGIServer):
    """waitress's TCP server with a probe lane and a whole-request timeout (waitress's own
    channel_timeout counts idle time only, which a client sending a byte a second resets)."""

    channel_class = _Channel
    _evicted = 0                 # idle connections closed at the limit since the last WARNING
    _evicted_logged_at = -EVICTION_LOG_INTERVAL

    def __init__(self, app: RetentionApp, service: ServiceConfig) -> None:
        adj = Adjustments(host=service.host, port=service.port, threads=WORKER_THREADS,
                          connection_limit=service.max_connections + _OWN_SOCKETS, backlog=BACKLOG,
                          max_request_header_size=MAX_HEADER_BYTES, max_request_body_size=MAX_BODY_BYTES,
                          asyncore_use_poll=True,   # select() fails past 1024 descriptors
                          ident="retention", expose_tracebacks=False)
        _apply_timeout(adj, service.http_timeout)
        self.retention_app = app
        self.probe_dispatcher = ThreadedTaskDispatcher()
        self.probe_dispatcher.set_thread_count(PROBE_THREADS)
        dispatcher = ThreadedTaskDispatcher()
        dispatcher.set_thread_count(WORKER_THREADS)
        super().__init__(app, map={}, dispatcher=dispatcher, adj=adj)

    def add_task(self, channel: _Channel) -> None:
        request = channel.requests[0] if channel.requests else None
        if (request is not None and request.error is None and getattr(request, "command", None) in ("GET", "HEAD")
                and (getattr(request, "path", "").rstrip("/") or "/") in PROBE_PATHS):
            self.probe_dispatcher.add_task(channel)
        else:
            self.task_dispatcher.add_task(channel)

    def readable(self) -> bool:
        """Poll the listening socket while below the connection limit, and at it while a connection
        could be closed to make room (`handle_accept` closes it). waitress stopped accepting at the
        limit until `http_timeout` closed one: a probe behind 500 idle sockets waited 10 s. With
        every slot answering a request, the listening socket is not polled (no busy loop): new
        connections wait in the backlog until an answer frees one, which wakes the loop."""
        now = time.time()
        if now >= self.next_channel_cleanup:
            self.next_channel_cleanup = now + self.adj.cleanup_interval
            self.maintenance(now)
        if not self.accepting:
            return False
        return len(self._map) < self.adj.connection_limit or self._room() is not None

    def handle_accept(self) -> None:
        if len(self._map) < self.adj.connection_limit:
            super().handle_accept()
            return
        channel = self._room()          # accepted at the next poll, once it has left the map
        if channel is not None and not channel.will_close:
            self._close_idle(channel, time.time())

    def _room(self) -> _Channel | None:
        """A connection closing at the next poll already, else the longest-idle one (no request
        being answered, nothing left to send), else None. (One closing with output its client does
        not read may never close: it is not counted, or the loop would spin.)"""
        oldest = None
        for channel in self.active_channels.values():
            if channel.total_outbufs_len:
                continue
            if channel.will_close:
                return channel
            if not channel.requests and not channel.close_when_flushed \
                    and (oldest is None or _idle_since(channel) < _idle_since(oldest)):
                oldest = channel
        return oldest

    def _close_idle(self, channel: _Channel, now: float) -> None:
        channel.will_close = True       # closed by the I/O loop at its next poll
        self._evicted += 1
        limit = self.adj.connection_limit - _OWN_SOCKETS
        logger.debug("http {} closed: idle {:.1f}s at service.max_connections ({})", _client(channel),
                     now - _idle_since(channel), limit)
        if now - self._evicted_logged_at >= EVICTION_LOG_INTERVAL:
            logger.warning("HTTP connections at service.max_connections ({}): closed {} "
                           "to accept new ones in the last {:g}s", limit, plural(self._evicted, "idle connection"),
                           min(EVICTION_LOG_INTERVAL, now - self._evicted_logged_at))
            self._evicted, self._evicted_logged_at = 0, now

    def maintenance(self, now: float) -> None:
        super().maintenance(now)      # closes connections idle for longer than channel_timeout
        cutoff = now - self.adj.channel_timeout
        for channel in list(self.active_channels.values()):
            since = getattr(channel, "partial_since", None)
            if since is not None and since < cutoff and not channel.requests and not channel.will_close:
                channel.will_close = True
                logger.debug("http {} closed: a request still incomplete after {:g}s (http_timeout)",
                             _client(channel), self.adj.channel_timeout)

    def shutdown(self) -> None:
        self.task_dispatcher.shutdown(timeout=5)
        self.probe_dispatcher.shutdown(timeout=1)
        wasyncore.close_all(self._map)


def _apply_timeout(adj: Adjustments, timeout: float) -> None:
    # waitress parses these as whole seconds; set after parsing so 2.5s stays 2.5s
    adj.channel_timeout = timeout
    adj.cleanup_interval = min(1.0, timeout / 4)     # the sweep runs at least this often
    adj.asyncore_loop_timeout = adj.cleanup_interval


def _idle_since(channel: _Channel) -> float:
    """Since when a connection has not sent a whole request: its partial request's first byte (a
    sender trickling bytes stays old), else its last activity."""
    return channel.partial_since if channel.partial_since is not None else channel.last_activity


def _client(channel) -> str:
    addr = channel.addr
    return f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) and len(addr) >= 2 else str(addr)


def _ensure_descriptors(max_connections: int) -> None:
    """Raise the soft open-files limit to fit `max_connections` (up to the hard limit)."""
    need = max_connections + _FD_SPARE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        new = need if hard == resource.RLIM_INFINITY else min(need, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        if new < need:
            logger.warning("open-files limit {} is below service.max_connections + {}: connections "
                           "past it are refused by the kernel", new, _FD_SPARE)


class _Running:
    """One bound server and the thread running its I/O loop."""

    def __init__(self, app: RetentionApp, service: ServiceConfig) -> None:
        _ensure_descriptors(service.max_connections)
        self.server = _Server(app, service)
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="retention-http", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        server = self.server
        while not self._stop.is_set():
            wasyncore.loop(timeout=server.adj.asyncore_loop_timeout, map=server._map, use_poll=True, count=1)

    def stop(self) -> None:
        self._stop.set()
        self.server.pull_trigger()        # wakes the poll at once
        self.thread.join(timeout=5)
        self.server.shutdown()


class RetentionHTTPServer:
    """Serves a `RetentionScheduler` over HTTP on `service.listen`, in background threads."""

    def __init__(self, scheduler: RetentionScheduler, service: ServiceConfig) -> None:
        self.scheduler = scheduler
        self.app = RetentionApp(scheduler, service)
        self._running: _Running | None = None
        self._lock = threading.Lock()

    @property
    def service(self) -> ServiceConfig:
        return self.app.service

    @property
    def stopping(self) -> bool:
        return self.app.stopping

    @property
    def address(self) -> tuple[str, int]:
        """The bound host and port (the real port when `listen` asked for port 0)."""
        assert self._running is not None
        server = self._running.server
        return server.effective_host, int(server.effective_port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def start(self) -> None:
        """Bind and serve; raises OSError when the address cannot be bound."""
        running = _Running(self.app, self.service)
        with self._lock:
            self._running = running

    def update(self, service: ServiceConfig) -> None:
        """Apply a reloaded `service` section: the token, `http_timeout` (every open connection)
        and `max_connections` (the next accept) at once; a new `listen` binds the new address and
        then releases the old one (kept, with an error, if the new one fails)."""
        old = self.app.service
        self.app.invalidate()
        if service.listen == old.listen:
            with self._lock:
                running = self._running
                if running is not None:
                    adj = running.server.adj
                    _apply_timeout(adj, service.http_timeout)
                    adj.connection_limit = service.max_connections + _OWN_SOCKETS
                    if service.max_connections > old.max_connections:
                        _ensure_descriptors(service.max_connections)
                self.app.service = service
            if (service.http_timeout, service.max_connections) != (old.http_timeout, old.max_connections):
                logger.info("reload: HTTP http_timeout {:g}s, max_connections {}", service.http_timeout,
                            service.max_connections)
            return
        try:
            running = _Running(self.app, service)
        except OSError as exc:
            logger.error("reload: cannot listen on {} ({}); still serving on {}", service.listen, exc, old.listen)
            self.app.service = old.model_copy(update={"token": service.token,
                                                      "allowed_hosts": service.allowed_hosts})
            return
        with self._lock:
            previous, self._running = self._running, running
            self.app.service = service
        if previous is not None:
            previous.stop()
        logger.info("reload: HTTP now on {} (was {})", self.url, old.listen)

    def stop(self) -> None:
        self.app.stopping = True
        with self._lock:
            running, self._running = self._running, None
        if running is not None:
            running.stop()
