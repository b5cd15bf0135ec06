"""The sidecar's endpoints as a WSGI application (served by `retention/web/server.py`).

`ROUTES` maps each path to its method and the `RetentionApp` method that answers it; adding an
endpoint is one line there, one method, and the models of its answers in `openapi.ANSWERS` (the
document at `/openapi.json` is generated from them). Before any route runs, every request passes the checks of
`retention/web/admission.py`: its Host (421), its query's size (414, 400); and a route whose method is
not GET is a state change, so its requests also pass the cross-origin and token checks (403, 401)
without the handler doing anything for it. Every answer is counted in
`retention_http_requests_total{path,code}` (an unknown path counts as "other") and every refused
request (a 4xx or 5xx) gets one DEBUG log line.

The costly views (/status with the pinned files of the last pass, /plan, /metrics) are
`SharedView`s kept for `VIEW_TTL` seconds: concurrent clients share one computation. The probes
(/livez, /healthz, /readyz) read state the scheduler already holds and never touch those views.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from http import HTTPStatus

from loguru import logger
from pydantic import BaseModel

from policies import ServiceConfig

from ..lookup import offsets_at, parse_time
from .admission import Refusal, check_host, check_state_change, parse_query
from .answers import (ClockAnswer, CompactAnswer, ErrorAnswer, HealthAnswer, LiveAnswer, OffsetsAnswer,
                      ReadyAnswer)
from .openapi import OPENAPI_PATH, openapi_document
from .page import PageBuilder, page_html
from ..scheduling.problems import WARNING
from ..scheduling.scheduler import PassRunningError, RetentionScheduler
from .views import SharedView

__all__ = ["ENDPOINTS", "OTHER", "PROBE_PATHS", "ROUTES", "VIEW_TTL", "RetentionApp", "Route"]

VIEW_TTL = 1.0      # seconds a computed /status, /plan or /metrics answer is shared
OTHER = "other"     # the path label of every request to an unknown path
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_JSON = "application/json"


@dataclass(frozen=True)
class Route:
    """An endpoint: its method ("GET" also answers HEAD) and the `RetentionApp` method answering it.
    `probe`: answered from state already known, on the server's probe lane (never queued behind a
    costly request). `flags`: the query flags a POST takes; any other parameter, or a flag that is
    not one of 1/true/yes/on/0/false/no/off, gets 400 and nothing runs (a typo in `?dry_run=1`
    must never run the real thing)."""

    method: str
    handler: str
    probe: bool = False
    flags: tuple[str, ...] = ()


ROUTES: dict[str, Route] = {
    "/healthz": Route("GET", "healthz", probe=True),
    "/readyz": Route("GET", "readyz", probe=True),
    "/livez": Route("GET", "livez", probe=True),
    "/metrics": Route("GET", "metrics"),
    "/status": Route("GET", "status"),
    "/plan": Route("GET", "plan"),
    "/offsets": Route("GET", "offsets"),
    "/clean": Route("POST", "clean", flags=("force",)),
    "/compact": Route("POST", "compact", flags=("dry_run",)),
    "/clock/accept": Route("POST", "clock_accept"),
    "/": Route("GET", "index"),
    "/ui/data": Route("GET", "ui_data"),
    OPENAPI_PATH: Route("GET", "openapi"),
}
ENDPOINTS = {path: route.method for path, route in ROUTES.items()}
PROBE_PATHS = frozenset(path for path, route in ROUTES.items() if route.probe)


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    environ: dict

    def flag(self, name: str) -> bool:
        return any(v.lower() in _TRUE for v in self.query.get(name, []))

    @property
    def client(self) -> str:
        return f"{self.environ.get('REMOTE_ADDR', '?')}:{self.environ.get('REMOTE_PORT', '?')}"


@dataclass
class Response:
    status: int
    body: bytes
    content_type: str = _JSON
    headers: dict[str, str] = field(default_factory=dict)


def _query_problem(request: Request, route: Route) -> str | None:
    """What is wrong with a POST's query string (one line), or None."""
    for name, values in request.query.items():
        if name not in route.flags:
            takes = ", ".join(route.flags) or "no parameters"
            return f"{request.path} takes {takes}, not {name[:60]!r}"
        bad = [v for v in values if v.lower() not in _TRUE | _FALSE]
        if bad:
            return f"{request.path}: {name} must be 1/true/yes/on or 0/false/no/off, not {bad[0][:60]!r}"
    return None


def json_response(status: int, obj, headers: dict[str, str] | None = None) -> Response:
    """`obj` (a model of retention/web/answers.py, or a dict) as the JSON answer."""
    if isinstance(obj, BaseModel):
        obj = obj.to_json()
    return Response(status, _json_bytes(obj), _JSON, headers or {})


def error_response(status: int, error: str, headers: dict[str, str] | None = None, **more) -> Response:
    """An `ErrorAnswer`: `{"error": one line}`, and `more` (`endpoints`, `running`)."""
    return json_response(status, ErrorAnswer(error=error, **more), headers)


def _json_bytes(obj) -> bytes:
    return (json.dumps(obj, indent=2, default=str) + "\n").encode()


class RetentionApp:
    """The WSGI application over a `RetentionScheduler`. Thread-safe: waitress calls it from its
    worker threads; `service` and `stopping` are replaced whole (reload, stop), never mutated."""

    def __init__(self, scheduler: RetentionScheduler, service: ServiceConfig) -> None:
        self.scheduler = scheduler
        self.service = service
        self.stopping = False
        self.page = PageBuilder(scheduler)
        self._status = SharedView(lambda: _json_bytes(scheduler.status()), VIEW_TTL)
        self._metrics = SharedView(scheduler.metrics.exposition, VIEW_TTL)
        self._documents: dict[bool, bytes] = {}      # the OpenAPI document, by whether a token is set
        self._plans = {(manual, force): SharedView(partial(self._plan_bytes, manual, force), VIEW_TTL)
                       for manual in (False, True) for force in (False, True)}

    def views(self) -> list[SharedView]:
        return [self._status, self._metrics, *self._plans.values()]

    def invalidate(self) -> None:
        """Drop the shared views (after a manual pass or a reload), so the next answer is fresh."""
        for view in self.views():
            view.invalidate()

    # ------------------------------------------------------------------ WSGI
    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        raw_path = environ.get("PATH_INFO") or "/"
        request = Request(environ.get("REQUEST_METHOD", "GET"), raw_path.rstrip("/") or "/", {}, environ)
        try:
            check_host(environ, self.service)
            request.query = parse_query(environ.get("QUERY_STRING", ""))
            response = self.respond(request)
        except Refusal as refusal:
            response = error_response(refusal.code, str(refusal), refusal.headers)
        if response.status >= 400:
            reason = ""
            if response.content_type == _JSON:
                reason = json.loads(response.body).get("error", "")
            self.refused(request.client, request.method, raw_path, response.status, reason, count=False)
        self.count(request.path, response.status)
        headers = [("Content-Type", response.content_type), ("Content-Length", str(len(response.body))),
                   ("Cache-Control", "no-store"), *response.headers.items()]
        start_response(f"{response.status} {HTTPStatus(response.status).phrase}", headers)
        return [b"" if request.method == "HEAD" else response.body]

    def count(self, path: str, code: int) -> None:
        self.scheduler.metrics.http_request(path if path in ROUTES else OTHER, code)

    def refused(self, client: str, method: str, path: str, code: int, reason: str, *, count: bool = True) -> None:
        """One DEBUG line (and, with `count`, the counter) for a refused request; `path` is cut short."""
        shown = path if len(path) <= 120 else f"{path[:120]}... ({len(path)} chars)"
        logger.debug("http {} {!r} {!r} refused: {} {}", client, method[:20], shown, code, reason[:200])
        if count:
            self.count(path, code)

    def respond(self, request: Request) -> Response:
        route = ROUTES.get(request.path)
        if route is None:
            return error_response(HTTPStatus.NOT_FOUND, f"no such endpoint {request.path[:120]}",
                                  endpoints=sorted(ROUTES))
        method = "GET" if request.method in ("GET", "HEAD") else request.method
        if method != route.method:
            allow = "GET, HEAD" if route.method == "GET" else route.method
            return error_response(HTTPStatus.METHOD_NOT_ALLOWED, f"{request.path} takes {route.method}",
                                  {"Allow": allow})
        if route.method != "GET":           # every state change: see admission.check_state_change
            try:
                check_state_change(request.environ, self.service, f"{request.method} {request.path}")
            except Refusal as refusal:
                logger.warning("{} {} from {} refused: {}", request.method, request.path, request.client, refusal)
                raise
            problem = _query_problem(request, route)
            if problem is not None:
                return error_response(HTTPStatus.BAD_REQUEST, problem)
        try:
            return getattr(self, route.handler)(request)
        except Exception as exc:  # noqa: BLE001 (one request fails, the server goes on)
            logger.opt(exception=exc).error("{} {} failed: {}", request.method, request.path, exc)
            return error_response(HTTPStatus.INTERNAL_SERVER_ERROR, str(exc))

    # ------------------------------------------------------------------ endpoints
    def healthz(self, request: Request) -> Response:
        """503 while a critical problem is active; a warning alone is listed and answers 200."""
        found = self.scheduler.health_problems()
        problems = [p for p in found if p.severity != WARNING]
        warnings = [p for p in found if p.severity == WARNING]
        return json_response(HTTPStatus.SERVICE_UNAVAILABLE if problems else HTTPStatus.OK,
                             HealthAnswer(status="unhealthy" if problems else "warning" if warnings else "ok",
                                          problems=[p.describe() for p in problems],
                                          warnings=[p.describe() for p in warnings],
                                          details=[p.as_json() for p in found]))

    def livez(self, request: Request) -> Response:
        """503 only for a problem a restart can fix (the liveness probe's endpoint)."""
        problem = self.scheduler.restart_problem()
        if problem is None:
            return json_response(HTTPStatus.OK, LiveAnswer(status="ok", problems=[], details=[]))
        return json_response(HTTPStatus.SERVICE_UNAVAILABLE, LiveAnswer(
            status="unhealthy", problems=[problem.describe()], details=[problem.as_json()]))

    def readyz(self, request: Request) -> Response:
        reasons = ["the HTTP server is stopping"] if self.stopping else self.scheduler.not_ready_reasons()
        return json_response(HTTPStatus.SERVICE_UNAVAILABLE if reasons else HTTPStatus.OK,
                             ReadyAnswer(status="not ready" if reasons else "ready", reasons=reasons))

    def metrics(self, request: Request) -> Response:
        return Response(HTTPStatus.OK, self._metrics.get(), self.scheduler.metrics.content_type)

    def status(self, request: Request) -> Response:
        return Response(HTTPStatus.OK, self._status.get())

    def plan(self, request: Request) -> Response:
        return Response(HTTPStatus.OK, self._plans[request.flag("manual"), request.flag("force")].get())

    def offsets(self, request: Request) -> Response:
        """?at=TIME (ISO 8601), optionally &log=NAME (repeatable): see retention/lookup.py."""
        unknown = sorted(set(request.query) - {"at", "log"})
        if unknown:
            return error_response(HTTPStatus.BAD_REQUEST, f"/offsets takes at and log, not {unknown[0][:60]!r}")
        if len(request.query.get("at", [])) != 1:
            return error_response(HTTPStatus.BAD_REQUEST, "/offsets needs one at=TIME (ISO 8601)")
        try:
            at = parse_time(request.query["at"][0], "at")
            return json_response(HTTPStatus.OK, OffsetsAnswer(**self._labelled(
                offsets_at(self.scheduler.config, at, request.query.get("log", [])))))
        except ValueError as exc:  # a bad time, or a log the configuration does not define
            return error_response(HTTPStatus.BAD_REQUEST, str(exc))

    def _plan_bytes(self, manual: bool, force: bool) -> bytes:
        return _json_bytes(self._labelled(self.scheduler.plan(manual=manual, force=force).to_json_dict()))

    def _labelled(self, answer: dict) -> dict:
        """``answer`` naming the configuration it was computed with first, as the CLI's are."""
        return {"config": self.scheduler.config_source, **answer}

    def index(self, request: Request) -> Response:
        return Response(HTTPStatus.OK, page_html(), "text/html; charset=utf-8")

    def ui_data(self, request: Request) -> Response:
        """The status page's data (retention/web/page.py), bounded in size; the page polls it."""
        return Response(HTTPStatus.OK, self.page.json_bytes())

    def openapi(self, request: Request) -> Response:
        """The OpenAPI document of these routes (retention/web/openapi.py), the token as configured."""
        token = self.service.token is not None
        if token not in self._documents:
            self._documents[token] = _json_bytes(openapi_document(ROUTES, token=token))
        return Response(HTTPStatus.OK, self._documents[token])

    def _refuse(self, request: Request) -> Response | None:
        """The answer refusing a state change while the service stops, or None to go on (the
        Host, origin and token checks are made for every state change before its handler runs)."""
        if self.stopping or not self.scheduler.running:
            return error_response(HTTPStatus.SERVICE_UNAVAILABLE, "the service is stopping")
        return None

    def _post(self, request: Request, run: Callable[[], object], running: str,
              body: Callable[[object], dict | BaseModel]) -> Response:
        """A POST that runs a pass: refused while stopping, 409 naming `running` when one runs."""
        refused = self._refuse(request)
        if refused is not None:
            return refused
        try:
            result = run()
        except PassRunningError as exc:
            return error_response(HTTPStatus.CONFLICT, str(exc), running=running)
        self.invalidate()
        return json_response(HTTPStatus.OK, body(result))

    def compact(self, request: Request) -> Response:
        """One compaction pass now (`?dry_run=1`: what it would do); 409 while one runs on a filesystem."""
        return self._post(request, lambda: self.scheduler.compact(dry_run=request.flag("dry_run")), "compaction",
                          lambda result: CompactAnswer(**self._labelled(result.to_json_dict())))

    def clock_accept(self, request: Request) -> Response:
        """The operator accepts the wall clock after a forward step (`retention clock accept`)."""
        return self._post(request, self.scheduler.accept_clock, "clock accept",
                          lambda accepted: ClockAnswer(**self._labelled({"clock": accepted})))

    def clean(self, request: Request) -> Response:
        return self._post(request, lambda: self.scheduler.clean(force=request.flag("force")), "manual pass",
                          lambda result: self._labelled(result.to_json_dict()))
