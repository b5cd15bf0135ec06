"""`commitlog groups PATH`: each consumer group's committed offset, its lag in records (offsets
from the committed one to the end) and bytes (of the live records there: marked dead ones are
passed over, as a consumer passes them), and its last commit time.

`--reset GROUP --to WHERE` and `--delete GROUP` are the command's only writes. Both are refused
while a writer holds the log (its flock on `.lock`, commitlog.locks), as Kafka refuses to reset an
active group: that writer's consumers would commit over the change. `force` does it anyway. While
the change is made, the writer lock is held through a read-only descriptor (nothing created), so
no writer opens meanwhile.
"""

from __future__ import annotations

import os
import re

from .. import record as rec
from ..layout import state_path
from ..locks import hold_writer_lock
from ..log import CommitLog
from ..state import LogState
from .inputs import UsageError, check_log_path, open_log, parse_offset, parse_time_ms
from .printing import iso_s, table

__all__ = ["WriterHoldsLog", "change_group", "describe_groups", "render_change", "render_groups"]


class WriterHoldsLog(Exception):
    """A reset or delete refused: a writer holds the log (the message says which, and --force)."""


def describe_groups(log: CommitLog) -> dict:
    """{"log", "start_offset", "end_offset", "groups": [{"group", "committed_offset", "lag_records",
    "lag_bytes", "last_commit", "below_start"}]}, groups by name."""
    committed, times = log.committed(), log.commit_times()
    start, end = log.start_offset, log.end_offset
    segments = log.segments()
    groups = []
    for name in sorted(committed):
        offset = committed[name]
        groups.append({"group": name, "committed_offset": offset, "lag_records": max(0, end - offset),
                       "lag_bytes": _lag_bytes(log, segments, max(offset, start), end),
                       "last_commit": iso_s(times.get(name)), "below_start": offset < start})
    return {"log": log.path, "start_offset": start, "end_offset": end, "groups": groups}


def _lag_bytes(log: CommitLog, segments, offset: int, end: int) -> int:
    """Framed bytes of the live records in [offset, end): whole segments by their live bytes, the
    one holding `offset` by reading its records from there."""
    total = 0
    for s in segments:
        if s.end_offset <= offset:
            continue
        if s.base_offset >= offset:
            total += s.live_bytes if s.live_bytes is not None else s.used_bytes
            continue
        scan = log.scan(offset, min(s.end_offset, end), zero_copy=True)
        try:
            total += sum(rec.HEADER_SIZE + len(r.value) + (0 if r.key is None else len(r.key)) for r in scan)
        finally:
            scan.close()
    return total


def render_groups(data: dict) -> str:
    n = len(data["groups"])
    lines = [f"log {data['log']}: offsets [{data['start_offset']}, {data['end_offset']}), "
             f"{n} consumer group{'s' if n != 1 else ''}"]
    if n:
        lines += table(["group", "committed", "lag records", "lag bytes", "last commit"],
                       [[g["group"], g["committed_offset"] if not g["below_start"] else
                         f"{g['committed_offset']} (removed)", g["lag_records"], g["lag_bytes"], g["last_commit"]]
                        for g in data["groups"]])
    return "\n".join(lines)


def _target(log: CommitLog, where: str) -> int:
    """The offset `--to WHERE` names: earliest, latest, an offset, or a time (ISO 8601, or epoch
    milliseconds after "@")."""
    start, end = log.start_offset, log.end_offset
    if where in ("earliest", "latest"):
        return start if where == "earliest" else end
    if re.fullmatch(r"[-+]?\d+", where):
        offset = parse_offset(where, "--to")
        if not start <= offset <= end:
            raise UsageError(f"--to {offset}: outside the log; {log.path} holds offsets [{start}, {end}) "
                             f"(--to {end} or latest: at the end)")
        return offset
    found = log.offset_for_time(parse_time_ms(where[1:] if where.startswith("@") else where, "--to"))
    return end if found is None else found


def change_group(path: str, group: str, where: str | None, *, force: bool) -> dict:
    """Reset `group` to `where` (delete it when None); what changed, as {"log", "group", "action",
    "before", "after", "writer_pid", "forced"}. UsageError for an unknown group or a bad `where`;
    WriterHoldsLog when a writer holds the log and not `force`."""
    full = check_log_path(path)
    hold = hold_writer_lock(full)
    try:
        writer = hold if isinstance(hold, tuple) else None
        if writer is not None and not force:
            raise WriterHoldsLog(f"{full} is open for writing by {_who(writer)}: its consumers would commit "
                                 f"over a {'reset' if where is not None else 'delete'}; stop them and the "
                                 f"writer first, or give --force")
        with open_log(path) as log:
            committed = log.committed()
            if group not in committed:
                raise UsageError(f"--{'reset' if where is not None else 'delete'} {group}: no such consumer "
                                 f"group in {full}; its groups: {', '.join(sorted(committed)) or 'none'}")
            after = _target(log, where) if where is not None else None
            if where is not None:
                log.commit(group, after)
        if where is None:
            state = LogState(state_path(full))
            try:
                state.delete_group(group)
            finally:
                state.close()
        return {"log": full, "group": group, "action": "reset" if where is not None else "delete", "to": where,
                "before": committed[group], "after": after, "writer_pid": writer[0] if writer else None,
                "forced": writer is not None}
    finally:
        if isinstance(hold, int):
            os.close(hold)


def _who(writer: tuple[int | None, str]) -> str:
    return f"process {writer[0]}" if writer[0] else "another process"


def render_change(data: dict) -> str:
    if data["action"] == "reset":
        text = (f"group {data['group']}: committed offset {data['before']} -> {data['after']} "
                f"(--to {data['to']}) in {data['log']}")
    else:
        text = f"group {data['group']}: deleted (it had committed offset {data['before']}) from {data['log']}"
    if data["forced"]:
        text += (f"\nforced while process {data['writer_pid'] or '(unknown)'} holds the log for writing: "
                 f"its consumers may commit over this")
    return text
