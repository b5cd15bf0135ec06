"""The OpenAPI document the sidecar serves at /openapi.json: a valid OpenAPI 3.1 document generated
from the models of the answers, and a real sidecar on loopback whose every endpoint answers what the
document says for that path, method and status (each live body validated against its schema). A key
served and not declared, or declared and not served, fails here."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import jsonschema
import pytest
from openapi_spec_validator import validate as validate_spec

from commitlog import CommitLog
from retention.scheduling.status_models import LogStatus, Status, StrictModel
from retention.web.admission import CLIENT_HEADER
from retention.web.openapi import ANSWERS, OPENAPI_PATH, openapi_document, summary_table
from retention.web.routes import ROUTES

from retention_helpers import config_text, make_log, set_age, write_config
from sidecar_helpers import Sidecar

TOKEN = "openapi-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _every_model(model: type[StrictModel], seen: set) -> set:
    if model in seen:
        return seen
    seen.add(model)
    for field in model.model_fields.values():
        for arg in _types(field.annotation):
            if isinstance(arg, type) and issubclass(arg, StrictModel):
                _every_model(arg, seen)
    return seen


def _types(annotation) -> list:
    args = getattr(annotation, "__args__", None)
    return [annotation] if not args else [t for a in args for t in _types(a)]


def validate_answer(document: dict, path: str, method: str, status: int, headers, body: bytes) -> None:
    """The answer is one the document declares for `path`, `method`, `status`, and its JSON body
    validates against that schema (every model forbids undeclared keys)."""
    operation = document["paths"][path][method.lower()]
    assert str(status) in operation["responses"], f"{method} {path} answered {status}, not in the document"
    (media, spec), = operation["responses"][str(status)]["content"].items()
    assert headers["Content-Type"].startswith(media), (path, headers["Content-Type"], media)
    if media == "application/json":
        schema = {**spec["schema"], "components": document["components"]}
        jsonschema.Draft202012Validator(schema).validate(json.loads(body))


def test_the_document_is_valid_openapi_3_1_with_and_without_a_token():
    for token in (False, True):
        document = openapi_document(ROUTES, token=token)
        validate_spec(document)
        assert document["openapi"].startswith("3.1")
        assert set(document["paths"]) == set(ROUTES) == set(ANSWERS)
        for path, route in ROUTES.items():
            (method,) = document["paths"][path]
            assert method == route.method.lower()
        posts = [op for item in document["paths"].values() for m, op in item.items() if m == "post"]
        assert posts and all(any(p["name"] == CLIENT_HEADER and p["in"] == "header" for p in op["parameters"])
                             for op in posts)
        assert all(("security" in op) == token for op in posts)
        assert all({"401", "403", "409"} <= set(op["responses"]) for op in posts)


def test_every_model_forbids_undeclared_keys_and_a_route_without_models_fails_the_document():
    schemas = openapi_document(ROUTES)["components"]["schemas"]
    for model in _every_model(Status, set()):
        assert model.model_config["extra"] == "forbid", model
        assert schemas[model.__name__]["additionalProperties"] is False, model
    with pytest.raises(KeyError, match="/new"):
        openapi_document({**ROUTES, "/new": ROUTES["/status"]})


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory):
    """A scratch log: three expired segments, a consumer group, dead records in sealed segments, an
    archive tier, compaction on, an override; the token set."""
    tmp = tmp_path_factory.mktemp("openapi")
    log_dir = tmp / "staging"
    bases = make_log(log_dir, 6)
    set_age(log_dir, bases[:3], 7200)
    with CommitLog.open(log_dir, readonly=True) as log:
        log.commit("etl", bases[4] + 1)
        log.mark_dead(range(bases[1], bases[3]))
    config_path, _ = write_config(tmp, config_text(
        tmp, sidecar=True, service={"token": TOKEN},
        policy={"archive": {"url": f"file://{tmp}/archive"}, "compaction": {"enabled": True}},
        log={"overrides": {"reserve": "2h"}}))
    with Sidecar(config_path, cwd=tmp) as s:
        s.wait_ready()
        s.log_dir = log_dir
        yield s


def test_every_endpoint_answers_what_the_served_document_says(sidecar):
    status, headers, body = sidecar.request("GET", OPENAPI_PATH)
    assert status == 200 and headers["Content-Type"] == "application/json"
    document = json.loads(body)
    assert document == openapi_document(ROUTES, token=True)     # the token is configured
    validate_spec(document)
    at = datetime.now(timezone.utc).isoformat()
    asked = [
        ("GET", "/healthz", {}), ("GET", "/readyz", {}), ("GET", "/livez", {}), ("GET", "/metrics", {}),
        ("GET", "/status", {}), ("GET", "/plan", {}), ("GET", "/plan?manual=1&force=1", {}),
        ("GET", f"/offsets?at={at}", {}), ("GET", "/offsets?at=2000-01-01T00:00:00Z&log=staging", {}),
        ("GET", "/offsets?at=soon", {}), ("GET", "/offsets?at=2000-01-01T00:00:00Z&log=nope", {}),
        ("GET", "/offsets", {}), ("GET", "/", {}), ("GET", "/ui/data", {}), ("GET", OPENAPI_PATH, {}),
        ("POST", "/clean", {}), ("POST", "/clean", {CLIENT_HEADER: ""}), ("POST", "/clean?forse=1", AUTH),
        ("POST", "/compact?dry_run=1", AUTH), ("POST", "/compact", AUTH), ("POST", "/clock/accept", AUTH),
        ("POST", "/clean", AUTH), ("GET", "/status", {}), ("GET", "/ui/data", {}),
        ("GET", "/status", {"Host": "attacker.example"}), ("GET", "/status?" + "x" * 5000, {}),
        ("GET", "/plan?" + "&".join(f"p{i}=1" for i in range(70)), {}),
    ]
    seen = {}
    for method, target, headers in asked:
        status, answer_headers, body = sidecar.request(method, target, headers=headers)
        path = target.partition("?")[0]
        validate_answer(document, path, method, status, answer_headers, body)
        seen.setdefault(path, set()).add(status)
    assert set(seen) == set(ROUTES)
    assert seen["/clean"] == {200, 400, 401, 403} and seen["/offsets"] == {200, 400}
    assert seen["/status"] == {200, 414, 421} and seen["/plan"] == {200, 400}


def test_the_served_status_has_exactly_the_keys_its_schema_declares(sidecar):
    _, status = sidecar.get_json("/status")
    document = json.loads(sidecar.request("GET", OPENAPI_PATH)[2])
    schemas = document["components"]["schemas"]
    assert set(status) == set(schemas["Status"]["properties"]) == set(Status.model_fields)
    (log,) = status["logs"]
    assert set(log) == set(schemas["LogStatus"]["properties"]) == set(LogStatus.model_fields)
    assert set(schemas["Status"]["required"]) == set(status)      # every key is always there
    # A key served without the schema, or a declared one missing, fails the validation.
    schema = {"$ref": "#/components/schemas/Status", "components": document["components"]}
    jsonschema.Draft202012Validator(schema).validate(status)
    for changed in ({**status, "new_field": 1}, {k: v for k, v in status.items() if k != "lag_note"},
                    {**status, "logs": [{**log, "segments": "many"}]}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.Draft202012Validator(schema).validate(changed)
    assert Status.model_validate(status).to_json() == status     # the model reads back what it serves


def test_the_http_api_page_shows_the_documents_endpoints():
    page = (Path(__file__).resolve().parents[2] / "docs" / "http-api.md").read_text()
    assert summary_table(openapi_document(ROUTES, token=True)) in page
    assert "`GET /openapi.json`" in page and "curl -s http://127.0.0.1:9464/openapi.json" in page


def _query_values():
    """What a client may put in a query value: booleans, offsets, times, noise (URL-encoded)."""
    from hypothesis import strategies as st
    return st.one_of(st.sampled_from(["1", "0", "true", "", "yes", "staging", "nope"]),
                     st.integers(min_value=-2**70, max_value=2**70).map(str),
                     st.datetimes(timezones=st.just(timezone.utc)).map(datetime.isoformat),
                     st.text(max_size=40))


def test_generated_requests_get_only_answers_the_document_declares(sidecar):
    """Property-based, from the served document (what schemathesis does, in Hypothesis directly):
    every GET path, with its declared query parameters and stray ones given generated values, and
    POST /compact?dry_run=1 with generated extras, answers a status the document declares for it
    with a body its schema accepts; nothing is a 500. Bounded: 120 requests."""
    import urllib.parse

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    document = json.loads(sidecar.request("GET", OPENAPI_PATH)[2])
    gets = sorted(p for p, ops in document["paths"].items() if "get" in ops)
    names = {p: [q["name"] for q in document["paths"][p]["get"].get("parameters", []) if q["in"] == "query"]
             for p in gets}
    requests = st.one_of(
        st.sampled_from(gets).flatmap(lambda p: st.tuples(
            st.just("GET"), st.just(p),
            st.dictionaries(st.sampled_from(names[p] + ["x", "force", "log"]), _query_values(), max_size=3))),
        st.tuples(st.just("POST"), st.just("/compact"),
                  st.dictionaries(st.sampled_from(["x", "log"]), _query_values(), max_size=2)
                  .map(lambda extra: {**extra, "dry_run": "1"})))
    answered: list[int] = []

    @settings(max_examples=120, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(requests)
    def check(request):
        method, path, query = request
        target = path + ("?" + urllib.parse.urlencode(query) if query else "")
        status, headers, body = sidecar.request(method, target, headers=AUTH if method == "POST" else {})
        assert status < 500, (target, status, body[:300])
        validate_answer(document, path, method, status, headers, body)
        answered.append(status)

    check()
    assert len(answered) >= 120 and 200 in answered and 400 in answered
