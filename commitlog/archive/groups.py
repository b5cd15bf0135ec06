"""Consumer groups' commits of a cluster log, kept on its tier: the same from every host.

Keys under the log's folder `<log>/`:
    groups/<group, percent-encoded>/<20-digit n>.json   commit n of the group:
                                  {"group", "offset", "committed_at_ms", "host"}

Each commit is a new object created with `Tier.create` (never rewritten in place): of two
committers creating commit n+1 one wins, the other reads the new newest and tries again, so the
newest is the last commit made, as in a local log's consumer state (a group may move back, as
`CommitLog.commit` allows). Older commits are pruned best effort (the newest KEEP stay); a
committer stalled between its read and its create across KEEP newer commits may create a number
pruned meanwhile, below the newest: its commit then counts as made before them (it overlapped
them), as if superseded at once. One
LIST of `groups/` and one GET per group read them all. Thread- and process-safe: the tier's
create is the only coordination.
"""

from __future__ import annotations

import json
import socket
import urllib.parse
from dataclasses import dataclass

from ..arguments import check_commit
from ..errors import ArchiveCorruptError, ArchiveError
from .tiers import Tier
from .validation import epoch_ms, stored_int

__all__ = ["GROUPS", "KEEP", "GroupCommit", "commit", "committed", "group_key"]

GROUPS = "groups"
KEEP = 5                              # commits of a group kept on the tier
_TRIES = 20                           # commits lost to other committers before giving up
_RELISTS = 5                          # a listed commit pruned before it was read: list again


@dataclass(frozen=True)
class GroupCommit:
    """A group's newest commit: it consumed everything below `offset`."""

    group: str
    offset: int
    committed_at_ms: int
    host: str
    number: int                       # its place in the group's commits

    def to_json(self) -> bytes:
        return json.dumps({"group": self.group, "offset": self.offset, "host": self.host,
                           "committed_at_ms": self.committed_at_ms}).encode()


def _folder(name: str, group: str) -> str:
    encoded = urllib.parse.quote(group, safe="")
    if encoded in (".", ".."):                # no path component of a directory tier
        encoded = encoded.replace(".", "%2E")
    return f"{name}/{GROUPS}/{encoded}/"


def group_key(name: str, group: str, number: int) -> str:
    return f"{_folder(name, group)}{number:020d}.json"


def _numbers(keys, prefix: str) -> dict[str, list[int]]:
    """Commit numbers by encoded group folder, oldest first, of the keys under `prefix`."""
    found: dict[str, list[int]] = {}
    for key in keys:
        folder, _, stem = key[len(prefix):].partition("/")
        if stem.endswith(".json") and len(stem) == 25 and stem[:20].isdigit():
            found.setdefault(folder, []).append(int(stem[:20]))
    return {folder: sorted(numbers) for folder, numbers in found.items()}


def _parse(data: bytes, tier: Tier, key: str, number: int) -> GroupCommit:
    try:
        body = json.loads(data)
        commit = GroupCommit(body["group"], body["offset"], body["committed_at_ms"], body["host"], number)
    except (ValueError, TypeError, KeyError, RecursionError) as exc:
        raise ArchiveCorruptError(tier.url, key, f"not a group commit ({str(exc)[:80]})") from None
    if not (isinstance(commit.group, str) and isinstance(commit.host, str) and stored_int(commit.offset)
            and epoch_ms(commit.committed_at_ms)):
        raise ArchiveCorruptError(tier.url, key, "not a group commit (a field of the wrong type or out of "
                                                 "range)")
    return commit


def _newest(tier: Tier, name: str, group: str) -> tuple[GroupCommit | None, list[int]]:
    """The group's newest commit and the numbers of its commits listed."""
    prefix = _folder(name, group)
    for _ in range(_RELISTS):
        numbers = _numbers(tier.keys(prefix), f"{name}/{GROUPS}/").get(prefix.split("/")[-2])
        if not numbers:
            return None, []
        key = group_key(name, group, numbers[-1])
        data = tier.read(key)
        if data is not None:
            return _parse(data, tier, key, numbers[-1]), numbers
    raise ArchiveError(tier.url, prefix, f"the newest commit vanished {_RELISTS} times while it was read")


def committed(tier: Tier, name: str) -> dict[str, GroupCommit]:
    """Every group's newest commit of log `name` on the tier."""
    prefix = f"{name}/{GROUPS}/"
    found = {}
    for folder, numbers in _numbers(tier.keys(prefix), prefix).items():
        group = urllib.parse.unquote(folder)
        key = group_key(name, group, numbers[-1])
        data = tier.read(key)
        newest = _parse(data, tier, key, numbers[-1]) if data is not None else _newest(tier, name, group)[0]
        if newest is not None:
            found[group] = newest
    return found


def commit(tier: Tier, name: str, group: str, offset: int, now_ms: int, end_offset: int | None = None,
           host: str | None = None) -> GroupCommit:
    """Record that `group` consumed everything below `offset` (at most `end_offset` when given,
    the log's end as the caller knows it). The same offset as the newest commit writes nothing."""
    check_commit(group, offset, offset if end_offset is None else end_offset, f"{tier.url} {name}")
    host = host or socket.gethostname()
    for _ in range(_TRIES):
        newest, numbers = _newest(tier, name, group)
        if newest is not None and newest.offset == offset:
            return newest
        number = newest.number + 1 if newest is not None else 0
        made = GroupCommit(group, offset, now_ms, host, number)
        if tier.create(group_key(name, group, number), made.to_json()) is not None:
            _prune(tier, name, group, numbers[:-KEEP + 1])
            return made
    raise ArchiveError(tier.url, _folder(name, group), f"group {group!r}: {_TRIES} newer commits were "
                       f"created by other committers first: not committed")


def _prune(tier: Tier, name: str, group: str, numbers: list[int]) -> None:
    """Best effort: delete the group's commits `numbers` (a failure leaves them)."""
    try:
        for old in numbers:
            tier.delete(group_key(name, group, old))
    except ArchiveError:
        pass
