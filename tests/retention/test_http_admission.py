"""The request checks of retention/web/admission.py on their own: which Host each kind of listener
answers to, what makes a state change one no page of another origin can send, the query bounds.
(The same against a real sidecar and a real browser: tests/adversary/test_http_*.py.)"""

from __future__ import annotations

import pytest

from policies import ServiceConfig
from retention.web.admission import CLIENT_HEADER, Refusal, check_host, check_state_change, parse_query


def _host_ok(listen: str, host: str, **service) -> bool:
    config = ServiceConfig(listen=listen, token="t" if not listen.startswith(("127.", "[::1]", "localhost")) else None,
                           **service)
    try:
        check_host({"HTTP_HOST": host}, config)
    except Refusal as refusal:
        assert refusal.code == 421
        return False
    return True


@pytest.mark.parametrize("listen, host, ok", [
    ("127.0.0.1:9464", "127.0.0.1:9464", True),
    ("127.0.0.1:9464", "localhost", True),
    ("127.0.0.1:9464", "[::1]:9464", True),
    ("127.0.0.1:9464", "attacker.example:9464", False),
    ("127.0.0.1:9464", "192.168.1.4:9464", False),
    ("[::1]:9464", "[::1]:9464", True),
    ("[::1]:9464", "[0:0::1]", True),            # the same address, written another way
    ("localhost:9464", "LOCALHOST:9464", True),
    ("0.0.0.0:9464", "10.4.2.9:9464", True),     # a wildcard listener: any IP address
    ("0.0.0.0:9464", "[fe80::1]:9464", True),
    ("0.0.0.0:9464", "localhost:9464", True),
    ("0.0.0.0:9464", "retention.ns.svc:9464", False),
    ("[::]:9464", "10.4.2.9", True),
    ("10.4.2.9:9464", "10.4.2.9:9464", True),    # a specific address: that one only
    ("10.4.2.9:9464", "10.4.2.10:9464", False),
    ("10.4.2.9:9464", "localhost:9464", False),
    ("sidecar.example:9464", "sidecar.example.:9464", True),
])
def test_which_host_each_listener_answers_to(listen, host, ok):
    assert _host_ok(listen, host) is ok


def test_allowed_hosts_add_names_to_any_listener():
    assert _host_ok("0.0.0.0:9464", "retention.ns.svc:9464", allowed_hosts=["retention.ns.svc"])
    assert _host_ok("127.0.0.1:9464", "Retention.NS.svc", allowed_hosts=["retention.ns.svc"])
    assert not _host_ok("0.0.0.0:9464", "x.retention.ns.svc", allowed_hosts=["retention.ns.svc"])


def _state_change(environ: dict, token: str | None = None) -> int | None:
    try:
        check_state_change({"HTTP_HOST": "127.0.0.1:9464", **environ}, ServiceConfig(token=token), "POST /clean")
    except Refusal as refusal:
        return refusal.code
    return None


def test_a_state_change_needs_what_no_simple_request_has_and_the_token():
    client = "HTTP_" + CLIENT_HEADER.upper().replace("-", "_")
    assert _state_change({}) == 403
    assert _state_change({"CONTENT_TYPE": "text/plain"}) == 403
    assert _state_change({"CONTENT_TYPE": "application/json"}) is None
    assert _state_change({client: "x"}) is None
    assert _state_change({client: " "}) == 403                       # an empty value is no header
    assert _state_change({client: "x", "HTTP_ORIGIN": "http://127.0.0.1:9464"}) is None
    assert _state_change({client: "x", "HTTP_ORIGIN": "http://127.0.0.1:9465"}) == 403
    assert _state_change({client: "x", "HTTP_ORIGIN": "http://[bad"}) == 403
    assert _state_change({client: "x"}, token="t") == 401
    assert _state_change({"HTTP_AUTHORIZATION": "Bearer t"}, token="t") is None
    assert _state_change({"HTTP_AUTHORIZATION": "Bearer u"}, token="t") == 401


def test_the_query_bounds():
    assert parse_query("at=1&log=a&log=a") == {"at": ["1"], "log": ["a", "a"]}
    with pytest.raises(Refusal) as caught:
        parse_query("log=a&" * 1000)
    assert caught.value.code == 414
    with pytest.raises(Refusal) as caught:
        parse_query("&".join(["x"] * 65))
    assert caught.value.code == 400
