"""The sidecar's HTTP endpoint (stdlib `ThreadingHTTPServer`; one thread per request).

    GET  /healthz   200 {"status": "ok"} when the scheduler runs and every log had a pass no older
                    than three of its intervals; 503 {"status": "unhealthy", "problems": [...]}
    GET  /readyz    200 once the first pass over every log is done; 503 before, and while stopping
    GET  /metrics   Prometheus text format (prometheus-client, a registry of the sidecar's own)
    GET  /status    JSON: per log its disk, segments, bytes, triggers, last pass, hung segments,
                    processes pinning deleted files, consumer groups with lag; the policies and jobs
    GET  /          the status page (HTML, self-contained; polls /ui/data, see retention/page.py)
    GET  /plan      JSON of `retention plan --json` (what a pass would do now, and why);
                    ?manual=1 plans as if a manual trigger were opened now, ?force=1 a forced one
    POST /clean     a manual trigger and a pass now; ?force=1 also ignores the reserve. Returns the
                    pass as `retention clean --json` does. Needs `Authorization: Bearer TOKEN` when
                    service.token is set (mandatory when listening beyond loopback).

Only /clean changes anything. The GET endpoints need no token (like any Prometheus exporter);
bind to loopback, the default, when paths and process command lines must not leave the machine.
"""

from __future__ import annotations

import hmac
import json
import socket
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from loguru import logger

from policies import ServiceConfig

from .page import PageBuilder, page_html
from .scheduler import RetentionScheduler

_TRUE = {"1", "true", "yes", "on"}
ENDPOINTS = {"/healthz": "GET", "/readyz": "GET", "/metrics": "GET", "/status": "GET", "/plan": "GET",
             "/clean": "POST", "/": "GET", "/ui/data": "GET"}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, handler, app: RetentionHTTPServer) -> None:
        host = address[0]
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.app = app
        super().__init__(address, handler)


class _Handler(BaseHTTPRequestHandler):
    server_version = "retention"
    sys_version = ""
    protocol_version = "HTTP/1.1"

    # ------------------------------------------------------------------ plumbing
    def log_message(self, format: str, *args) -> None:  # noqa: A002 (the stdlib's name)
        logger.debug("http {} {}", self.address_string(), format % args)

    def _send(self, status: int, body: bytes, content_type: str, headers: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, obj, headers: dict | None = None) -> None:
        body = (json.dumps(obj, indent=2, default=str) + "\n").encode()
        self._send(status, body, "application/json", headers)

    def _route(self) -> tuple[str, dict[str, list[str]]]:
        parts = urlsplit(self.path)
        path = parts.path.rstrip("/") or "/"
        return path, parse_qs(parts.query)

    def _flag(self, query: dict[str, list[str]], name: str) -> bool:
        return any(v.lower() in _TRUE for v in query.get(name, []))

    def _wrong_method(self, path: str) -> bool:
        allowed = ENDPOINTS.get(path)
        if allowed is None:
            self._json(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint {path}",
                                              "endpoints": sorted(ENDPOINTS)})
            return True
        if allowed != ("GET" if self.command in ("GET", "HEAD") else self.command):
            self._json(HTTPStatus.METHOD_NOT_ALLOWED, {"error": f"{path} takes {allowed}"},
                       {"Allow": "GET, HEAD" if allowed == "GET" else allowed})
            return True
        return False

    # ------------------------------------------------------------------ methods
    def do_HEAD(self) -> None:  # noqa: N802
        self.do_GET()

    def do_GET(self) -> None:  # noqa: N802
        path, query = self._route()
        if self._wrong_method(path):
            return
        app: RetentionHTTPServer = self.server.app
        scheduler = app.scheduler
        try:
            if path == "/healthz":
                healthy, problems = scheduler.health()
                self._json(HTTPStatus.OK if healthy else HTTPStatus.SERVICE_UNAVAILABLE,
                           {"status": "ok" if healthy else "unhealthy", "problems": problems})
            elif path == "/readyz":
                ready = scheduler.ready and not app.stopping
                self._json(HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE,
                           {"status": "ready" if ready else "not ready"})
            elif path == "/metrics":
                self._send(HTTPStatus.OK, scheduler.metrics.exposition(), scheduler.metrics.content_type)
            elif path == "/status":
                self._json(HTTPStatus.OK, scheduler.status())
            elif path == "/plan":
                result = scheduler.plan(manual=self._flag(query, "manual"), force=self._flag(query, "force"))
                self._json(HTTPStatus.OK, result.to_json_dict())
            elif path == "/ui/data":   # the status page's data (retention/page.py)
                self._send(HTTPStatus.OK, app.page.json_bytes(), "application/json")
            else:                      # "/": the status page
                self._send(HTTPStatus.OK, page_html(), "text/html; charset=utf-8")
        except Exception as exc:  # noqa: BLE001 (one request fails, the server goes on)
            logger.opt(exception=exc).error("GET {} failed: {}", path, exc)
            self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": str(exc)})

    def do_POST(self) -> None:  # noqa: N802
        path, query = self._route()
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(min(length, 1 << 16))   # a body is ignored
        if self._wrong_method(path):
            return
        app: RetentionHTTPServer = self.server.app
        token = app.service.token
        if token is not None:
            given = self.headers.get("Authorization", "")
            scheme, _, value = given.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), token.encode()):
                logger.warning("POST /clean from {} refused: missing or wrong token", self.address_string())
                self._json(HTTPStatus.UNAUTHORIZED, {"error": "POST /clean needs Authorization: Bearer TOKEN "
                                                     "(service.token)"}, {"WWW-Authenticate": "Bearer"})
                return
        if app.stopping or not app.scheduler.running:
            self._json(HTTPStatus.SERVICE_UNAVAILABLE, {"error": "the service is stopping"})
            return
        try:
            result = app.scheduler.clean(force=self._flag(query, "force"))
        except Exception as exc:  # noqa: BLE001
            logger.opt(exception=exc).error("POST /clean failed: {}", exc)
            self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": str(exc)})
            return
        body = result.to_json_dict()
        body["interrupted"] = result.interrupted
        self._json(HTTPStatus.OK, body)


class RetentionHTTPServer:
    """Serves a `RetentionScheduler` over HTTP on `service.listen`, in a background thread."""

    def __init__(self, scheduler: RetentionScheduler, service: ServiceConfig) -> None:
        self.scheduler = scheduler
        self.service = service
        self.page = PageBuilder(scheduler)
        self.stopping = False
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def address(self) -> tuple[str, int]:
        """The bound host and port (the real port when `listen` asked for port 0)."""
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return host, port

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def start(self) -> None:
        """Bind and serve; raises OSError when the address cannot be bound."""
        server = _Server((self.service.host, self.service.port), _Handler, self)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.25},
                                  name="retention-http", daemon=True)
        thread.start()
        with self._lock:
            self._server, self._thread = server, thread

    def update(self, service: ServiceConfig) -> None:
        """Apply a reloaded `service` section: the token at once; a new `listen` binds the new
        address and then releases the old one (kept, with an error, if the new one fails)."""
        old_listen = self.service.listen
        if service.listen == old_listen:
            self.service = service
            return
        try:
            server = _Server((service.host, service.port), _Handler, self)
        except OSError as exc:
            logger.error("reload: cannot listen on {} ({}); still serving on {}", service.listen, exc, old_listen)
            self.service = self.service.model_copy(update={"token": service.token})
            return
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.25},
                                  name="retention-http", daemon=True)
        thread.start()
        with self._lock:
            old = self._server
            self._server, self._thread, self.service = server, thread, service
        if old is not None:
            old.shutdown()
            old.server_close()
        logger.info("reload: HTTP now on {} (was {})", self.url, old_listen)

    def stop(self) -> None:
        self.stopping = True
        with self._lock:
            server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
