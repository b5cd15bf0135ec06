"""`service:`, the sidecar process's own settings (listen address, token, audit trail, logging, HTTP
limits, health). Not a retention decision: the pure policy models are in `policy`."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, PlainSerializer, PlainValidator, ValidationInfo, field_validator, model_validator


from policies.units import describe_value, format_duration
from policies.config.fields import (LOG_LEVELS, PositiveDuration, _DAY, _HOUR, _MINUTE, _SECOND, _Strict,
                                    _config_problem, _probe, _resolve_path)


MAX_ALLOWED_HOSTS = 64
_LABEL = re.compile(r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?")
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")   # what a loopback listener also answers to


def host_name(text: str) -> str | None:
    """``text`` (a host name or IP address, an IPv6 one with or without brackets, no port) in the
    form Host headers are compared in: lower case, no trailing dot, no brackets, an IP address
    written canonically; None when it is neither a DNS name nor an IP address."""
    name = text.strip().lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        pass
    name = name[:-1] if name.endswith(".") else name
    if not name or len(name) > 253 or not all(_LABEL.fullmatch(label) for label in name.split(".")):
        return None
    return name


def _host_names(value: object) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"expected a list of host names, got {describe_value(value)}")
    if len(value) > MAX_ALLOWED_HOSTS:
        raise ValueError(f"at most {MAX_ALLOWED_HOSTS} names, got {len(value)}")
    names = []
    for text in value:
        name = host_name(text)
        if name is None:
            why = (" (a name, not a URL)" if "://" in text else
                   " (no port: any port is accepted)" if text.count(":") == 1 else "")
            raise ValueError(f"{describe_value(text)} is not a host name or IP address{why}")
        names.append(name)
    return tuple(dict.fromkeys(names))


HostNames = Annotated[tuple[str, ...], PlainValidator(_host_names), PlainSerializer(list, return_type=list[str])]


class ServiceConfig(_Strict):
    """The sidecar process: HTTP endpoint, logging and audit trail. Immutable."""

    listen: str = Field(
        default="127.0.0.1:9464",
        description="HOST:PORT of the HTTP server (/healthz /readyz /metrics /status /plan, POST /clean); "
        "an IPv6 host goes in brackets, [::1]:9464. Default loopback only.",
    )
    log_level: str = Field(
        default="INFO",
        description="One of TRACE DEBUG INFO SUCCESS WARNING ERROR CRITICAL (any case); TRACE shows every "
        "per-segment decision.",
    )
    log_format: Literal["text", "json"] = Field(default="text", description="Log line format: text or json.")
    audit: Path = Field(
        default=Path("data/audit.jsonl"),
        validate_default=True,
        description="File the audit trail appends one JSON line per deletion to; relative to the base directory.",
    )
    allowed_hosts: HostNames = Field(
        default=(),
        description="Extra names a request's Host header may carry (a DNS name or IP address, no port), "
        "besides the listen host (with localhost, 127.0.0.1 and [::1] for a loopback listener; any IP "
        "address for 0.0.0.0 or [::]). Any other Host is refused with 421, so a web page cannot read "
        "the sidecar through DNS rebinding. List the names clients use: a Kubernetes Service, a proxy. "
        f"At most {MAX_ALLOWED_HOSTS}; default none.",
    )
    token: str | None = Field(
        default=None,
        description="Shared secret every state change (POST /clean, POST /compact) requires as "
        "Authorization: Bearer TOKEN; mandatory when listen is not a loopback address.",
    )

    http_timeout: PositiveDuration = Field(
        default=10 * _SECOND,
        description="Seconds an HTTP connection may stay idle, or take to send one request, before the "
        "sidecar closes it (slow or stalled clients cannot hold a connection). 1s to 1h; default 10s. "
        "A reload applies it to every open connection at once.",
    )
    max_connections: int = Field(
        default=500,
        ge=1,
        le=10_000,
        description="Most HTTP connections open at once (idle ones included; they cost no thread). At it, "
        "a new connection closes the one idle longest, so idle sockets cannot keep a probe out; only while "
        "every one is being answered do new ones wait in the listen backlog. 1 to 10000; default 500. "
        "A reload applies it to the next connection accepted.",
    )

    failed_passes_unhealthy: int = Field(
        default=3,
        ge=1,
        le=1000,
        description="How many passes in a row must fail (or find the log unreadable) before a log makes "
        "/healthz answer 503 (problem passes-failing). 1 to 1000; default 3. A reload applies it.",
    )

    watch_rolls: bool = Field(
        default=True,
        description="Check a log's disk the moment a writer prepares or rolls a segment in it (Linux "
        "inotify), so pressure is acted on within milliseconds; off (or without inotify), at the next "
        "disk check. A reload applies it.",
    )

    clock_step_threshold: PositiveDuration = Field(
        default=1 * _DAY,
        description="How far the wall clock may jump forward between two looks (against the time elapsed on a "
        "clock no step moves), or stand ahead at start of where the clock record beside the audit trail says "
        "it should be (after a reboot, of the newest time the record, the logs, group commits and audit trail "
        "hold), before it counts as stepped: then what only the step would expire or make stale "
        "waits until `retention clock accept` or the clock returns (problem clock-stepped). 1m to 30d; "
        "default 1d. A reload applies it.",
    )

    @field_validator("clock_step_threshold")
    @classmethod
    def _check_clock_step_threshold(cls, value: float) -> float:
        if not _MINUTE <= value <= 30 * _DAY:
            raise ValueError(f"must be between 1m and 30d, got {format_duration(value)}")
        return value

    @field_validator("http_timeout")
    @classmethod
    def _check_http_timeout(cls, value: float) -> float:
        if not 1 * _SECOND <= value <= _HOUR:
            raise ValueError(f"must be between 1s and 1h, got {format_duration(value)}")
        return value

    @field_validator("listen")
    @classmethod
    def _check_listen(cls, value: str) -> str:
        _split_listen(value)
        return value

    @field_validator("log_level", mode="plain")
    @classmethod
    def _check_log_level(cls, value: object) -> str:
        if not isinstance(value, str) or value.upper() not in LOG_LEVELS:
            raise ValueError(f"expected one of {', '.join(LOG_LEVELS)}, got {describe_value(value)}")
        return value.upper()

    @field_validator("audit", mode="plain")
    @classmethod
    def _check_audit(cls, value: object, info: ValidationInfo) -> Path:
        path = _resolve_path(value, info)
        if _probe(path, path.is_dir):
            raise ValueError(f"{path} is a directory; the audit trail is a file")
        return path

    @field_validator("token")
    @classmethod
    def _check_token(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be empty; leave the key out for no token")
        return value

    @model_validator(mode="after")
    def _require_token_beyond_loopback(self) -> ServiceConfig:
        if not self.is_loopback and self.token is None:
            raise _config_problem(
                f"{self.listen} is not a loopback address, so service.token is required (it guards POST /clean)",
                "listen",
            )
        return self

    @property
    def host(self) -> str:
        """The listen host without IPv6 brackets."""
        return _split_listen(self.listen)[0]

    @property
    def port(self) -> int:
        return _split_listen(self.listen)[1]

    @property
    def is_loopback(self) -> bool:
        """True when the server is reachable from this machine only (localhost, 127.0.0.0/8, ::1)."""
        host = self.host
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:  # a host name other than localhost may resolve anywhere
            return False


def _split_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"expected HOST:PORT such as 127.0.0.1:9464, got {listen!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"an IPv6 host goes in brackets, e.g. [::1]:9464, got {listen!r}")
    if not 0 <= int(port) <= 65535:
        raise ValueError(f"port {port} is outside 0-65535")
    return host, int(port)


