"""Asking a running sidecar: `retention status`, and `plan`, `clean`, `compact` with `--url`
(`clock accept` also without, through `sidecar_listening`).

Exit status (retention/service/embedded.py): 0 done, 1 the sidecar answered with a failure (or is
unhealthy, for `status`), 3 it cannot be reached; with `--json` an unreachable sidecar is a JSON
object too (``{"url", "error", "reachable": false}``).
"""

from __future__ import annotations

import http.client
import json
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime

from pydantic import ValidationError

from commitlog import META_FILE
from policies import humanize_size

from ..scheduling.status_models import ArchiveStatus, BudgetView, LogStatus, Status
from ..web.admission import CLIENT_HEADER
from .embedded import EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE

DEFAULT_URL = "http://127.0.0.1:9464"


class SidecarUnreachable(OSError):
    """No answer from the sidecar (refused, timed out, a name that does not resolve)."""


class SidecarRefused(RuntimeError):
    """The sidecar answered with an error status; ``code`` is it, ``str()`` its one-line reason."""

    def __init__(self, code: int, reason: str) -> None:
        self.code = code
        super().__init__(reason)


def normalize_url(url: str) -> str:
    """``url`` with ``http://`` added when it names no scheme (``localhost:9464``), no trailing slash;
    ValueError naming the problem for anything else than http(s)://HOST[:PORT][/PREFIX]."""
    text = url.strip()
    if "://" not in text:
        text = "http://" + text
    try:
        parts = urllib.parse.urlsplit(text)
    except ValueError as exc:        # an unclosed IPv6 bracket: http://[::1
        raise ValueError(f"--url {url!r}: {exc} (expected HOST:PORT or http://HOST:PORT)") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"--url {url!r}: expected HOST:PORT or http://HOST:PORT")
    try:
        parts.port
    except ValueError:
        raise ValueError(f"--url {url!r}: the port is not a number from 0 to 65535") from None
    return text.rstrip("/")


def sidecar_listening(listen: str, *, timeout: float = 10.0) -> str | None:
    """The URL of what accepts connections at a configuration's `service.listen` (a wildcard host is
    asked on loopback), or None when nothing does (connection refused; port 0: the kernel's pick
    cannot be known). SidecarUnreachable when it cannot tell (timed out, no route)."""
    host, _, port = listen.rpartition(":")
    host = host[1:-1] if host.startswith("[") else host
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    if int(port) == 0:
        return None
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except ConnectionRefusedError:
        return None
    except OSError as exc:
        raise SidecarUnreachable(f"cannot tell whether a sidecar listens on service.listen {listen} ({exc}): "
                                 f"give --url") from None
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def call_sidecar(url: str, path: str, *, method: str = "GET", token: str | None = None,
                 timeout: float = 600.0) -> dict:
    """``method`` ``url``+``path`` and its decoded JSON; raises SidecarUnreachable or SidecarRefused."""
    request = urllib.request.Request(url + path, method=method, data=b"" if method == "POST" else None)
    request.add_header(CLIENT_HEADER, "retention")     # what a state change needs (retention/web/admission.py)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            reason = json.loads(exc.read()).get("error") or exc.reason
        except (ValueError, AttributeError, OSError, http.client.HTTPException):  # no JSON object, or cut short
            reason = exc.reason
        raise SidecarRefused(exc.code, f"{method} {url}{path} answered {exc.code}: {reason}") from None
    except (OSError, ValueError, http.client.HTTPException) as exc:  # refused, reset, timed out, cut
        # short (IncompleteRead), or a body that is not JSON
        raise SidecarUnreachable(f"cannot reach the sidecar at {url}: {getattr(exc, 'reason', exc)}") from None


def print_status(url: str, *, as_json: bool = False, wait: float = 0.0) -> int:
    """Print the status of the sidecar at `url` (as `normalize_url` gives it); 0 healthy, 1 unhealthy
    or an error answer, 3 unreachable (after `wait` seconds of asking again, when given)."""
    try:
        status = _ask_status(url, wait)
    except (SidecarUnreachable, SidecarRefused) as exc:
        if as_json:
            print(json.dumps({"url": url, "error": str(exc), "reachable": isinstance(exc, SidecarRefused)}))
        print(f"retention: {exc}", file=sys.stderr)
        return EXIT_FAILED if isinstance(exc, SidecarRefused) else EXIT_UNREACHABLE
    if as_json:
        json.dump(status, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        try:
            # A newer sidecar's extra keys are not this client's business; a missing one is.
            report = Status.model_validate(status, extra="ignore")
        except ValidationError as exc:
            where = ".".join(str(part) for part in exc.errors()[0]["loc"])
            print(f"retention: {url}/status answered what this client cannot read: {where}: "
                  f"{exc.errors()[0]['msg']}", file=sys.stderr)
            return EXIT_FAILED
        sys.stdout.write(render_status(report, url))
    return EXIT_OK if status.get("healthy") else EXIT_FAILED


def _ask_status(url: str, wait: float) -> dict:
    """GET /status. With `wait`, asked again every 0.2 s for up to `wait` seconds while nothing
    answers or the sidecar is not ready (its first passes not done): then its last answer, or the
    last SidecarUnreachable, saying how long it waited."""
    deadline = time.monotonic() + wait
    while True:
        try:
            status = call_sidecar(url, "/status", timeout=10.0)
            if status.get("ready") or time.monotonic() + 0.2 > deadline:
                return status
        except SidecarUnreachable as exc:
            if time.monotonic() + 0.2 > deadline:
                if wait > 0:
                    raise SidecarUnreachable(f"{exc} (asked for {wait:g}s)") from None
                raise
        time.sleep(0.2)


def _ago(iso: str | None) -> str:
    if not iso:
        return "never"
    try:
        seconds = time.time() - datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return iso
    return f"{_duration(max(seconds, 0))} ago"


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


def _offsets(log: LogStatus) -> str:
    start, end = log.start_offset, log.end_offset
    if start is None or end is None:
        return "offsets unknown"
    return "no records yet" if start == end == 0 else f"offsets {start} to {end} (exclusive)"


def _ratio(value) -> str:
    return "?" if value is None else f"{value:.1%}"


def _size(value) -> str:
    return "?" if value is None else humanize_size(int(value))


def render_status(s: Status, url: str = "") -> str:
    """The text `retention status` prints of a `/status` answer."""
    lines = [f"retention sidecar {url} pid {s.pid}, up {_duration(s.uptime_seconds or 0)}, "
             f"{'healthy' if s.healthy else 'UNHEALTHY'}, {'ready' if s.ready else 'not ready'}; "
             f"configuration loaded {_ago(s.config_loaded_at)}"]
    lines += [f"  problem: {problem}" for problem in s.problems]
    lines += [f"  warning: {warning}" for warning in s.warnings]
    lines.append("")
    for name, p in s.policies.items():
        hours = ("every hour" if len(p.delete_at_hours) == 24
                 else ", ".join(f"{h:02d}" for h in p.delete_at_hours) or "none")
        lines.append(f"policy {name}: every {_duration(p.interval_seconds)}, delete hours {hours}"
                     f"{' (' + p.timezone + ')' if p.timezone else ''}, reserve "
                     f"{_duration(p.reserve_seconds)}, {p.files_per_pass} files a pass; disk clean "
                     f"{p.clean_ratio:.0%} / force {p.force_ratio:.0%}"
                     f"{'' if p.force else ' (off)'} / refuse writes {p.refuse_writes_ratio:.0%}")
    for fs in s.filesystems:
        lines.append(f"filesystem {fs.mountpoint}: {_ratio(fs.used_ratio)} used of "
                     f"{_size(fs.total_bytes)}, {_size(fs.free_bytes)} free, pressure {fs.pressure}"
                     f"{' (pressure passes running)' if fs.pressure_pass_running else ''}")
    for name, b in s.budgets.items():
        lines.append(_budget_line(name, b))
    for name, c in s.cluster.items():
        lines.append(f"cluster log {name}: tier lease held by {c.owner or 'nobody'} until "
                     f"{c.until or '-'}{' (this sidecar: it runs retention on the tier)' if c.mine else ''}"
                     f"{'; lease error: ' + c.lease_error if c.lease_error else ''}")
    for log in s.logs:
        lines.append("")
        lines += _log_lines(log, s.archive.get(log.name))
    if any(log.consumer_groups for log in s.logs):
        lines.append("")
        lines.append(f"({s.lag_note})")
    return "\n".join(lines) + "\n"


def _log_lines(log: LogStatus, archive: ArchiveStatus | None) -> list[str]:
    """The lines of one log in `render_status`."""
    lines = [f"log {log.name} ({log.path}), policy {log.policy}"]
    if not log.exists:
        lines.append(f"  not a commit log yet (no {META_FILE})")
    if log.segments is not None:
        lines.append(f"  {log.segments} segments, {_size(log.bytes)}; {_offsets(log)}; triggers: "
                     f"{', '.join(log.triggers) or 'none'}"
                     f"{'; manual passes left: ' + str(log.manual_passes_left) if log.manual_passes_left else ''}")
    last = log.last_pass
    if last:
        lines.append(f"  last pass {_ago(last.finished_at)} ({last.kind}): {last.outcome}, "
                     f"deleted {last.deleted} ({_size(last.freed_bytes)}) in "
                     f"{last.duration_seconds:.3f}s" + (f"; {last.error}" if last.error else ""))
    else:
        lines.append("  no pass yet")
    for g in log.consumer_groups:
        flags = (" (stale: not protecting)" if g.stale else "") + \
                (" (behind the start: data lost)" if g.behind_start else "")
        lines.append(f"  consumer {g.group}: committed {g.committed_offset}, lag {g.lag_records} "
                     f"records, about {_size(g.lag_bytes)}{flags}")
    for h in log.hung:
        lines.append(f"  hung {h.segment}: held for {_duration(h.held_seconds)}")
    for p in log.pinned:
        lines.append(f"  pinned: pid {p.pid} ({p.command}) still {p.how} {p.path}, {_size(p.bytes)}")
    if archive:
        lines.append(_archive_line(archive))
    if log.error and log.exists:
        lines.append(f"  error: {log.error}")
    return lines


def _budget_line(name: str, b: BudgetView) -> str:
    """A shared byte budget: its use, then each log's size against its share."""
    parts = [f"{log.name} {_size(log.bytes)} of {_size(log.share_bytes)} (weight {log.weight:g}"
             f"{', floor ' + _size(log.floor_bytes) if log.floor_bytes else ''})" for log in b.logs]
    return (f"budget {name}: {_size(b.used_bytes)} used of {_size(b.bytes)}{' (OVER)' if b.over else ''}; "
            + ", ".join(parts))


def _archive_line(a: ArchiveStatus) -> str:
    """A log's archive tier (the `archive` object of /status): what it holds, the upload lag, trouble."""
    line = (f"  archive {a.url}: {a.archived_segments} segments, {_size(a.archived_bytes)}; upload lag "
            f"{_duration(a.lag_seconds or 0)}, {_size(a.lag_bytes)}; last upload "
            f"{_ago(a.last_success_at)}")
    if a.missing:
        line += "; MISSING: the tier lost what its manifest lists"
    if a.owned_elsewhere:
        line += "; another host uploads this log"
    if a.last_error:
        line += f"; {a.failures} failures, last: {a.last_error}"
    return line
