"""Who may ask the sidecar what: the checks `RetentionApp` makes before any route runs. The threat
model and why each check is enough is in docs/security.md.

- Host: a request whose Host header names something else than the sidecar (`allowed_names`) is
  refused, so a web page cannot read it through DNS rebinding (a name of the attacker's, re-pointed
  at 127.0.0.1, makes the browser treat the sidecar as the attacker's own site). A request without
  Host (HTTP/1.0) is no browser's and passes.
- State changes (every route that is not GET): a browser sends a cross-origin request without
  asking first only when it is CORS-"simple" (a form, `fetch(..., {mode: "no-cors"})`). So such a
  request must carry what no simple request can: `Content-Type: application/json`, the
  `CLIENT_HEADER` header, or `Authorization`; the sidecar grants no CORS preflight, so a page of
  another origin can never send one. And its Origin, when the browser names one, must be the
  sidecar's own, and Sec-Fetch-Site, when sent, same-origin.
- The token (`service.token`): state changes need `Authorization: Bearer TOKEN` when it is set.
- The query string: at most `MAX_QUERY_BYTES` (414) and `MAX_QUERY_FIELDS` parameters (400), so no
  request can make a handler repeat its work thousands of times.

Pure functions of the WSGI environ and the service configuration: thread-safe.
"""

from __future__ import annotations

import hmac
import ipaddress
from http import HTTPStatus
from urllib.parse import parse_qs, urlsplit

from policies import ServiceConfig
from policies.config.service import LOOPBACK_NAMES, host_name

__all__ = ["CLIENT_HEADER", "MAX_QUERY_BYTES", "MAX_QUERY_FIELDS", "Refusal", "allowed_names", "check_host",
           "check_state_change", "parse_query"]

CLIENT_HEADER = "X-Retention-Client"    # any value; the CLI sends "retention"
MAX_QUERY_BYTES = 4096
MAX_QUERY_FIELDS = 64
_WILDCARDS = ("0.0.0.0", "::")
_JSON = "application/json"
_SAME_ORIGIN = ("same-origin", "none")   # Sec-Fetch-Site values of the sidecar's own pages, or no page


class Refusal(Exception):
    """A request refused before its route runs: ``code`` (an HTTPStatus), ``str()`` the one-line
    reason, ``headers`` to add to the answer."""

    def __init__(self, code: int, reason: str, headers: dict[str, str] | None = None) -> None:
        self.code = code
        self.headers = headers or {}
        super().__init__(reason)


def allowed_names(service: ServiceConfig) -> tuple[frozenset[str], bool]:
    """(the host names a Host header may carry, whether any IP address may be): the listen host,
    `service.allowed_hosts`, the loopback names for a loopback listener, any IP address and
    localhost for a wildcard one (an IP address in Host can never be a rebinding: the page itself
    was loaded from that address)."""
    names = {host_name(service.host) or service.host, *service.allowed_hosts}
    wildcard = service.host in _WILDCARDS
    if service.is_loopback or wildcard:
        names.update(LOOPBACK_NAMES)
    return frozenset(names), wildcard


def _split_host(value: str) -> str | None:
    """The host of a Host header value (``name``, ``name:port``, ``[v6]:port``), None when malformed."""
    host, sep, port = value.rpartition(":") if not value.endswith("]") else (value, "", "")
    if not sep:
        host = value
    elif not port.isdigit() or (":" in host and not host.startswith("[")):
        return None
    return host_name(host)


def check_host(environ: dict, service: ServiceConfig) -> None:
    """Refusal 421 when the request's Host is not one the sidecar answers to."""
    value = environ.get("HTTP_HOST")
    if value is None:
        return
    host = _split_host(value)
    names, any_ip = allowed_names(service)
    if host is not None and (host in names or (any_ip and _is_ip(host))):
        return
    raise Refusal(HTTPStatus.MISDIRECTED_REQUEST,
                  f"Host {value[:100]!r} is not a name this sidecar answers to ({', '.join(sorted(names))}"
                  f"{', any IP address' if any_ip else ''}); add it to service.allowed_hosts if clients use it")


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def check_state_change(environ: dict, service: ServiceConfig, what: str) -> None:
    """Refusal 403 for a request of a state-changing route that a page of another origin could have
    sent (see the module docstring), 401 for a missing or wrong token. `what` names the request."""
    origin = environ.get("HTTP_ORIGIN")
    if origin is not None and not _same_origin(origin, environ.get("HTTP_HOST")):
        raise Refusal(HTTPStatus.FORBIDDEN, f"{what} from a page of another origin ({origin[:100]!r}) is refused")
    site = environ.get("HTTP_SEC_FETCH_SITE")
    if site is not None and site.lower() not in _SAME_ORIGIN:
        raise Refusal(HTTPStatus.FORBIDDEN, f"{what} from a {site[:30]} page is refused (Sec-Fetch-Site)")
    media_type = environ.get("CONTENT_TYPE", "").partition(";")[0].strip().lower()
    authorization = environ.get("HTTP_AUTHORIZATION", "")
    client = environ.get("HTTP_" + CLIENT_HEADER.upper().replace("-", "_"), "").strip()
    if media_type != _JSON and not client and not authorization:
        raise Refusal(HTTPStatus.FORBIDDEN, f"{what} needs a {CLIENT_HEADER} header (any value) or Content-Type: "
                      f"{_JSON}, which no page of another origin can send")
    token = service.token
    if token is not None:
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), token.encode()):
            raise Refusal(HTTPStatus.UNAUTHORIZED, f"{what} needs Authorization: Bearer TOKEN (service.token)",
                          {"WWW-Authenticate": "Bearer"})


def _same_origin(origin: str, host: str | None) -> bool:
    """True when `origin` (an Origin header) is the sidecar's own: http(s) and the Host's name and port."""
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    return host is not None and parts.scheme in ("http", "https") and parts.netloc.lower() == host.lower()


def parse_query(query_string: str) -> dict[str, list[str]]:
    """The parameters of a query string; Refusal 414 past MAX_QUERY_BYTES, 400 past MAX_QUERY_FIELDS."""
    if len(query_string) > MAX_QUERY_BYTES:
        raise Refusal(HTTPStatus.REQUEST_URI_TOO_LONG,
                      f"the query string is {len(query_string)} bytes; at most {MAX_QUERY_BYTES} are accepted")
    try:
        return parse_qs(query_string, keep_blank_values=True, max_num_fields=MAX_QUERY_FIELDS)
    except ValueError:
        raise Refusal(HTTPStatus.BAD_REQUEST, f"more than {MAX_QUERY_FIELDS} query parameters") from None
