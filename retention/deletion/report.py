"""Readable tables of a plan or a pass, for `retention plan` and `retention clean`, drawn from the
JSON a pass gives (the same in process and from a sidecar's /plan or /clean)."""

from __future__ import annotations

from policies import explain_codes, humanize_size


def render_result(data: dict) -> str:
    """The table of a ``PassResult.to_json_dict()``."""
    executed = data["kind"] == "pass"
    lines = [f"{data['kind']} at {data['at']}"]
    for log in data["logs"]:
        lines.append("")
        if log.get("not_created"):
            lines.append(f"log {log['name']}: {log['note']}")
            continue
        if log.get("error") and not log["files"]:
            lines.append(f"log {log['name']} ({log['path']}): {log['error']}")
            continue
        disk = log["disk"]
        verb = "deleted" if executed else "to delete"
        lines.append(f"log {log['name']} ({log['path']}): disk {disk['used_ratio']:.1%} used of "
                     f"{humanize_size(disk['total_bytes'])}, triggers: "
                     f"{', '.join(log['triggers']) or 'none'}; {log['deleted']} {verb}, "
                     f"{humanize_size(log['freed_bytes'])}")
        if log.get("unpaced"):
            lines.append(f"  {log['unpaced']}")
        if log.get("stale_groups"):
            lines.append(f"  stale consumer groups (no longer protecting): {', '.join(log['stale_groups'])}")
        # LIVE: the share of a segment's record bytes not dead (what a compaction would keep).
        rows = [("SEGMENT", "BASE OFFSET", "BYTES", "LIVE", "ACTION", "WHY")]
        for f in log["files"]:
            live = f.get("live_ratio")
            rows.append((f["segment"], str(f["base_offset"]), humanize_size(f["bytes"]),
                         "-" if live is None else f"{live:.0%}", f["action"],
                         _why(f) + (f"  ({f['error']})" if f.get("error") else "")))
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        for r in rows:
            lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[5])
        for p in log.get("pinned", []):
            lines.append(f"  pinned: pid {p['pid']} ({p['command']}) still {p['how']} {p['path']}, "
                         f"{humanize_size(p['bytes'])}")
        if log.get("not_writable"):
            lines.append(f"  read only: {log['not_writable']}")
        if log.get("error"):
            lines.append(f"  error: {log['error']}")
    return "\n".join(lines) + "\n"


def _why(file: dict) -> str:
    """Each code of a decision with its figures (`policies.explain_codes`, from the JSON)."""
    return explain_codes(file["reasons"], file.get("because"), file.get("overridden", ()),
                         file.get("overridden_by"), file.get("details", {}))
