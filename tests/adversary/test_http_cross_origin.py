"""A web page must not change anything in the sidecar. With the default configuration (loopback, no
token) a form POST or a `no-cors` fetch from any page open in a browser on the host is a CORS
"simple request" the browser sends without asking; it used to run a forced pass that deleted
segments inside a 72 h reserve. Each test starts a real sidecar over a log whose sealed segments
only a forced pass deletes, and the first proves that an accepted forced clean does delete them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from http_helpers import (CHROMEDRIVER, CHROMIUM, address, headless_chromium, page_server, raw_request,
                          reserved_log_sidecar, segment_bases)
from retention.web.admission import CLIENT_HEADER

pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[test]')")


@pytest.fixture
def sidecar(tmp_path):
    s, sealed = reserved_log_sidecar(tmp_path)
    with s:
        s.wait_ready()
        s.sealed, s.log_dir = sealed, tmp_path / "staging"
        yield s


def _deleted(sidecar) -> list[int]:
    return sorted(set(sidecar.sealed) - set(segment_bases(sidecar.log_dir)))


def _audit_deletions(sidecar) -> list[dict]:
    audit = Path(sidecar.cwd) / "audit.jsonl"
    lines = audit.read_text().splitlines() if audit.exists() else []
    return [entry for entry in map(json.loads, lines) if entry.get("event", "deleted") == "deleted"]


def _host(sidecar) -> str:
    return "%s:%d" % address(sidecar)


def test_an_accepted_forced_clean_deletes_the_segments_inside_the_reserve(sidecar):
    """The proof the refusals below can fail: the same POST from the CLI's kind of client deletes."""
    assert _deleted(sidecar) == []
    status, body = raw_request(sidecar, "POST", "/clean?force=1", {"Host": _host(sidecar), CLIENT_HEADER: "tests"})
    assert status == 200, body
    assert _deleted(sidecar) == sidecar.sealed
    assert len(_audit_deletions(sidecar)) == len(sidecar.sealed)


HOSTILE_PAGE = """<!doctype html><title>cats</title>
<form id="form" method="POST" action="{target}"><input name="x" value="1"></form>
<form id="plain" method="POST" enctype="text/plain" action="{target}" target="sink">
  <input name='{{"force": 1, "x": "' value='"}}'></form>
<iframe name="sink"></iframe>
<script>
const sent = [];
fetch("{target}", {{method: "POST", mode: "no-cors"}}).then(() => sent.push("no-cors"),
                                                      e => sent.push("no-cors failed"));
fetch("{target}", {{method: "POST", mode: "no-cors", body: '{{"force": 1}}',
                    headers: {{"Content-Type": "text/plain"}}}}).then(() => sent.push("text"));
document.getElementById("plain").submit();
setTimeout(() => document.getElementById("form").submit(), 1500);
</script>"""


def test_a_page_of_another_origin_posting_a_forced_clean_is_refused_and_deletes_nothing(sidecar):
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("no headless browser: install Debian's chromium and chromium-driver")
    target = f"{sidecar.url}/clean?force=1"
    with page_server(HOSTILE_PAGE.format(target=target)) as page, headless_chromium() as browser:
        browser.get(page + "/")
        # the form navigates the tab to the sidecar's answer: its JSON refusal
        sidecar.wait_for(lambda: browser.current_url.startswith(sidecar.url), timeout=30, what="the form submitted")
        answer = browser.find_element("tag name", "body").text
    assert _deleted(sidecar) == [] and _audit_deletions(sidecar) == [], answer
    assert "is refused" in answer, answer
    refused = sidecar.wait_for(lambda: sidecar.log().count("POST /clean from ") >= 4 and sidecar.log(),
                               what="four refusals logged")
    assert "from a page of another origin ('http://127.0.0.1:" in refused
    assert _deleted(sidecar) == [] and _audit_deletions(sidecar) == []


@pytest.mark.parametrize("headers, why", [
    ({}, f"needs a {CLIENT_HEADER} header"),
    ({"Content-Type": "application/x-www-form-urlencoded"}, f"needs a {CLIENT_HEADER} header"),
    ({"Content-Type": "text/plain;charset=UTF-8"}, f"needs a {CLIENT_HEADER} header"),
    ({"Content-Type": "multipart/form-data; boundary=x"}, f"needs a {CLIENT_HEADER} header"),
    ({CLIENT_HEADER: "x", "Origin": "http://127.0.0.1:1"}, "from a page of another origin"),
    ({CLIENT_HEADER: "x", "Origin": "null"}, "from a page of another origin"),
    ({"Content-Type": "application/json", "Origin": "http://attacker.example"}, "from a page of another origin"),
    ({CLIENT_HEADER: "x", "Sec-Fetch-Site": "same-site"}, "from a same-site page is refused"),
    ({CLIENT_HEADER: "x", "Sec-Fetch-Site": "cross-site"}, "from a cross-site page is refused"),
])
def test_a_state_change_a_browser_could_send_unasked_is_refused_with_403(sidecar, headers, why):
    for path in ("/clean?force=1", "/compact"):
        status, body = raw_request(sidecar, "POST", path, {"Host": _host(sidecar), **headers})
        assert status == 403 and why in json.loads(body)["error"], (path, body)
    assert _deleted(sidecar) == []


@pytest.mark.parametrize("headers", [
    {"Content-Type": "application/json"},
    {"Content-Type": "Application/JSON; charset=utf-8"},
    {CLIENT_HEADER: "curl"},
    {CLIENT_HEADER: "x", "Sec-Fetch-Site": "same-origin"},
])
def test_a_state_change_no_page_of_another_origin_can_send_is_accepted(sidecar, headers):
    host = _host(sidecar)
    status, body = raw_request(sidecar, "POST", "/clean?force=1", {"Host": host, **headers})
    assert status == 200, body
    status, body = raw_request(sidecar, "POST", "/compact?dry_run=1",
                               {"Host": host, "Origin": f"http://{host}", **headers})
    assert status == 200, body
    assert _deleted(sidecar) == sidecar.sealed


def test_with_a_token_its_authorization_header_is_enough_and_a_form_is_still_refused(tmp_path):
    s, sealed = reserved_log_sidecar(tmp_path, service={"token": "s3cret"})
    with s:
        s.wait_ready()
        host = _host(s)
        assert raw_request(s, "POST", "/clean?force=1", {"Host": host})[0] == 403
        assert raw_request(s, "POST", "/clean?force=1", {"Host": host, CLIENT_HEADER: "x"})[0] == 401
        assert raw_request(s, "POST", "/clean?force=1", {"Host": host, "Authorization": "Bearer wrong"})[0] == 401
        assert segment_bases(tmp_path / "staging")[: len(sealed)] == sealed
        status, body = raw_request(s, "POST", "/clean?force=1", {"Host": host, "Authorization": "Bearer s3cret"})
        assert status == 200, body
        assert not set(sealed) & set(segment_bases(tmp_path / "staging"))
        assert "s3cret" not in s.log()
