"""`retention status`: ask a running sidecar for `/status` and print it readably (or as JSON)."""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime

from commitlog import META_FILE
from policies import humanize_size

from .embedded import EXIT_FAILED, EXIT_OK



def fetch_status(url: str, timeout: float = 10.0) -> dict:
    """GET `url`/status and decode it; raises OSError (URLError) or ValueError."""
    with urllib.request.urlopen(url.rstrip("/") + "/status", timeout=timeout) as response:
        return json.loads(response.read())


def print_status(url: str, *, as_json: bool = False) -> int:
    """Print the sidecar's status; exit status 0, or 1 when it cannot be reached or is unhealthy."""
    try:
        status = fetch_status(url)
    except urllib.error.HTTPError as exc:
        print(f"retention: {url}/status answered {exc.code} {exc.reason}", file=sys.stderr)
        return EXIT_FAILED
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        print(f"retention: cannot reach the sidecar at {url}: {reason}", file=sys.stderr)
        return EXIT_FAILED
    if as_json:
        json.dump(status, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_status(status, url))
    return EXIT_OK if status.get("healthy") else EXIT_FAILED


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


def _ratio(value) -> str:
    return "?" if value is None else f"{value:.1%}"


def _size(value) -> str:
    return "?" if value is None else humanize_size(int(value))


def render_status(s: dict, url: str = "") -> str:
    lines = [f"retention sidecar {url} pid {s.get('pid')}, up {_duration(s.get('uptime_seconds') or 0)}, "
             f"{'healthy' if s.get('healthy') else 'UNHEALTHY'}, {'ready' if s.get('ready') else 'not ready'}; "
             f"configuration loaded {_ago(s.get('config_loaded_at'))}"]
    for problem in s.get("problems", []):
        lines.append(f"  problem: {problem}")
    lines.append("")
    for name, p in s.get("policies", {}).items():
        hours = ("every hour" if len(p["delete_at_hours"]) == 24
                 else ", ".join(f"{h:02d}" for h in p["delete_at_hours"]) or "none")
        lines.append(f"policy {name}: every {_duration(p['interval_seconds'])}, delete hours {hours}"
                     f"{' (' + p['timezone'] + ')' if p.get('timezone') else ''}, reserve "
                     f"{_duration(p['reserve_seconds'])}, {p['files_per_pass']} files a pass; disk clean "
                     f"{p['clean_ratio']:.0%} / force {p['force_ratio']:.0%}"
                     f"{'' if p['force'] else ' (off)'} / refuse writes {p['refuse_writes_ratio']:.0%}")
    for fs in s.get("filesystems", []):
        lines.append(f"filesystem {fs['mountpoint']}: {_ratio(fs['used_ratio'])} used of "
                     f"{_size(fs['total_bytes'])}, {_size(fs['free_bytes'])} free, pressure {fs['pressure']}"
                     f"{' (pressure passes running)' if fs.get('pressure_pass_running') else ''}")
    for log in s.get("logs", []):
        lines.append("")
        lines.append(f"log {log['name']} ({log['path']}), policy {log['policy']}")
        if not log.get("exists"):
            lines.append(f"  not a commit log yet (no {META_FILE})")
        if log.get("segments") is not None:
            lines.append(f"  {log['segments']} segments, {_size(log['bytes'])}; offsets "
                         f"{log.get('start_offset')}..{log.get('end_offset')}; triggers: "
                         f"{', '.join(log.get('triggers') or []) or 'none'}"
                         f"{'; manual passes left: ' + str(log['manual_passes_left']) if log.get('manual_passes_left') else ''}")
        last = log.get("last_pass")
        if last:
            lines.append(f"  last pass {_ago(last.get('finished_at'))} ({last['kind']}): {last['outcome']}, "
                         f"deleted {last['deleted']} ({_size(last['freed_bytes'])}) in "
                         f"{last['duration_seconds']:.3f}s" + (f"; {last['error']}" if last.get("error") else ""))
        else:
            lines.append("  no pass yet")
        for g in log.get("consumer_groups", []):
            flags = (" (stale: not protecting)" if g.get("stale") else "") + \
                    (" (behind the start: data lost)" if g.get("behind_start") else "")
            lines.append(f"  consumer {g['group']}: committed {g['committed_offset']}, lag {g['lag_records']} "
                         f"records, about {_size(g['lag_bytes'])}{flags}")
        for h in log.get("hung", []):
            lines.append(f"  hung {h['segment']}: held for {_duration(h['held_seconds'])}")
        for p in log.get("pinned", []):
            lines.append(f"  pinned: pid {p['pid']} ({p['command']}) still {p['how']} {p['path']}, "
                         f"{_size(p['bytes'])}")
        if log.get("error") and log.get("exists"):
            lines.append(f"  error: {log['error']}")
    if s.get("logs"):
        lines.append("")
        lines.append(f"({s.get('lag_note', '')})")
    return "\n".join(lines) + "\n"
