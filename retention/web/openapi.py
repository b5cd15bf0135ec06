"""The OpenAPI 3.1 document the sidecar serves at `GET /openapi.json`, generated from the models of
its answers (retention/scheduling/status_models.py, retention/web/page_models.py, answers.py) and
its routes (retention/web/routes.py: paths, methods, the flags a POST takes), with the admission
rules of retention/web/admission.py: the header every state change needs and, when `service.token`
is set, the bearer token. `ANSWERS` says which model answers each path with which status; a route
without an entry there fails the build of the document (and its test).

Pure: `openapi_document()` builds a new dict each call (the sidecar keeps one per token setting).
"""

from __future__ import annotations

from http import HTTPStatus
from importlib import metadata

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from ..scheduling.status_models import Status
from .admission import CLIENT_HEADER, MAX_QUERY_BYTES, MAX_QUERY_FIELDS
from .answers import (ClockAnswer, CompactAnswer, ErrorAnswer, HealthAnswer, LiveAnswer, OffsetsAnswer, PlanAnswer,
                      ReadyAnswer)
from .page_models import PageData

__all__ = ["ANSWERS", "OPENAPI_PATH", "TEXT_ANSWERS", "openapi_document", "summary_table"]

OPENAPI_PATH = "/openapi.json"
REF = "#/components/schemas/{model}"
_OBJECT = "object"   # an answer that is a JSON object of no declared model (the document itself)

# path -> {status: the model of its JSON body}. Refusals every route may answer are added below.
ANSWERS: dict[str, dict[int, type[BaseModel] | str]] = {
    "/healthz": {200: HealthAnswer, 503: HealthAnswer},
    "/readyz": {200: ReadyAnswer, 503: ReadyAnswer},
    "/livez": {200: LiveAnswer, 503: LiveAnswer},
    "/metrics": {},
    "/status": {200: Status},
    "/plan": {200: PlanAnswer},
    "/offsets": {200: OffsetsAnswer, 400: ErrorAnswer},
    "/clean": {200: PlanAnswer},
    "/compact": {200: CompactAnswer},
    "/clock/accept": {200: ClockAnswer},
    "/": {},
    "/ui/data": {200: PageData},
    OPENAPI_PATH: {200: _OBJECT},
}
# path -> the media type of its 200 answer when it is not JSON
TEXT_ANSWERS = {"/metrics": "text/plain", "/": "text/html"}

_FLAG = {"type": "string", "enum": ["1", "true", "yes", "on", "0", "false", "no", "off"]}
_GET_QUERY = {
    "/plan": [("manual", _FLAG, False, "plan as if a manual trigger were opened now"),
              ("force", _FLAG, False, "... a forced one (younger than the reserve too)")],
    "/offsets": [("at", {"type": "string"}, True, "a time, ISO 8601 (2026-11-25T10:00:00Z)"),
                 ("log", {"type": "array", "items": {"type": "string"}}, False,
                  "a configured log (repeatable); every log when absent")],
}
_FLAG_DOC = {"force": "also ignore the reserve (a forced pass)", "dry_run": "only say what it would do"}
_EVERY = {400: f"more than {MAX_QUERY_FIELDS} query parameters",
          414: f"a query string over {MAX_QUERY_BYTES} bytes",
          421: "a Host header that does not name the sidecar (service.allowed_hosts)",
          500: "the handler failed (one line)"}
_STATE_CHANGE = {400: "a query parameter other than the flags, or a flag that is not 1/true/yes/on/0/false/no/off",
                 401: "no Authorization: Bearer TOKEN while service.token is set",
                 403: f"sent as a page of another origin could (no {CLIENT_HEADER}, Content-Type: "
                      "application/json or Authorization; a foreign Origin or Sec-Fetch-Site)",
                 409: "a pass or compaction already runs (`running` names it)",
                 503: "the sidecar is stopping"}


def _schemas() -> dict:
    models = sorted({m for answers in ANSWERS.values() for m in answers.values() if m is not _OBJECT} | {ErrorAnswer},
                    key=lambda m: m.__name__)
    _, top = models_json_schema([(m, "serialization") for m in models], ref_template=REF)
    return top["$defs"]


def _body(model: type[BaseModel] | str) -> dict:
    schema = {"type": "object"} if model is _OBJECT else {"$ref": REF.format(model=model.__name__)}
    return {"application/json": {"schema": schema}}


def _responses(path: str, method: str) -> dict:
    answers: dict[int, dict] = {}
    for code, model in ANSWERS[path].items():
        answers[code] = {"description": HTTPStatus(code).phrase, "content": _body(model)}
    if path in TEXT_ANSWERS:
        answers[200] = {"description": "OK", "content": {TEXT_ANSWERS[path]: {"schema": {"type": "string"}}}}
    refusals = {**_EVERY, **(_STATE_CHANGE if method == "post" else {})}
    for code, when in refusals.items():
        answers.setdefault(code, {"description": when, "content": _body(ErrorAnswer)})
    return {str(code): answers[code] for code in sorted(answers)}


def _parameters(path: str, route) -> list[dict]:
    if route.method == "GET":
        return [{"name": name, "in": "query", "required": required, "description": doc, "schema": schema,
                 **({"style": "form", "explode": True} if schema.get("type") == "array" else {})}
                for name, schema, required, doc in _GET_QUERY.get(path, [])]
    flags = [{"name": flag, "in": "query", "required": False, "description": _FLAG_DOC.get(flag, flag),
              "schema": _FLAG} for flag in route.flags]
    return [*flags, {"name": CLIENT_HEADER, "in": "header", "required": False, "schema": {"type": "string"},
                     "description": "any value; a state change needs it, Content-Type: application/json or "
                                    "Authorization (the retention command sends it)"}]


def _version() -> str:
    try:
        return metadata.version("commitlog-retention")
    except metadata.PackageNotFoundError:
        return "unknown"


def openapi_document(routes: dict, *, token: bool = False) -> dict:
    """The document for `routes` (`routes.ROUTES`); with `token`, state changes need the bearer token."""
    missing = sorted(set(routes) - set(ANSWERS))
    if missing:
        raise KeyError(f"no answer models for {', '.join(missing)} in retention/web/openapi.py ANSWERS")
    paths = {}
    for path, route in routes.items():
        method = route.method.lower()
        operation = {"operationId": route.handler, "summary": f"{route.method} {path}",
                     "parameters": _parameters(path, route), "responses": _responses(path, method)}
        if method == "post" and token:
            operation["security"] = [{"bearer": []}]
        paths[path] = {method: operation}
    document = {
        "openapi": "3.1.0",
        "info": {"title": "commitlog-retention sidecar", "version": _version(),
                 "description": "What the retention sidecar serves (docs/http-api.md)."},
        "paths": paths,
        "components": {"schemas": _schemas()},
    }
    if token:
        document["components"]["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer", "description": "service.token"}}
    return document


def summary_table(document: dict) -> str:
    """The document's endpoints as a Markdown table (docs/http-api.md shows it, and a test compares)."""
    error = REF.format(model=ErrorAnswer.__name__)
    lines = ["| method | path | answers | error bodies (`ErrorAnswer`) |", "| --- | --- | --- | --- |"]
    for path, item in document["paths"].items():
        for method, operation in item.items():
            answers, errors = [], []
            for code, response in operation["responses"].items():
                (media, spec), = response["content"].items()
                ref = spec["schema"].get("$ref")
                if ref == error:
                    errors.append(code)
                else:
                    answers.append(f"{code} {ref.rsplit('/', 1)[-1] if ref else media}")
            lines.append(f"| {method.upper()} | `{path}` | {', '.join(answers)} | {', '.join(errors)} |")
    return "\n".join(lines) + "\n"
