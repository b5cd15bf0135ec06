"""What a pass did: per log the plan, what happened to each segment and what still pins space, and
the pass as a whole (the object `retention plan|clean --json` prints). Plain data, filled by the
cleaner during one pass and read-only after it, so safe to share once the pass returned.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from commitlog import META_FILE
from policies import DELETE, DELETED, FAILED, HELD, HUNG, KEEP, NOT_ATTEMPTED, LogPlan, LogSnapshot

from .pinned import PinnedFile, pinned_bytes

__all__ = ["LogPassResult", "PassResult"]


@dataclass
class LogPassResult:
    """One log's part of a pass: the plan, what happened to each segment, and what still pins space."""

    name: str
    path: str
    plan: LogPlan | None
    actions: dict[int, str] = field(default_factory=dict)     # base offset -> deleted/hung/failed
    removed_by_another: set[int] = field(default_factory=set)  # planned, removed by another process
    errors: dict[int, str] = field(default_factory=dict)      # base offset -> why it failed
    deleted_bytes: int = 0
    error: str | None = None                                  # the log could not be planned at all
    not_examined: int = 0                                     # segments a pass did not examine
    not_examined_bytes: int = 0                               # ... and the bytes of their files
    snapshot: LogSnapshot | None = None                       # what the plan was made from (None when carried)
    start_offset: int | None = None                           # the log's start offset then
    pinned: list[PinnedFile] = field(default_factory=list)
    owned_elsewhere: bool = False                             # another process owns its retention
    owner_pid: int | None = None                              # ... that one, when it left its pid
    rolled: bool = False                                      # its last segment sealed by roll_after
    not_created: bool = False                                 # no writer created it yet: nothing to do
    damage: list[dict] = field(default_factory=list)          # its damage record (commitlog.damage)
    not_writable: str | None = None                           # why nothing can be deleted from it
    permission_denied: str | None = None                      # its user may not read or write it: why
    paced_seconds: float = 0.0                                # waited to hold disk.delete_rate
    unpaced: str | None = None                                # why its delete_rate was not applied
    cache: dict | None = None                                 # a cluster log's cache: its run (cluster_cache)
    no_descriptors: str | None = None                         # not owned or read for lack of descriptors: why
    unchanged: bool = False                                   # not planned again: its last plan stands (unchanged)

    @property
    def deleted(self) -> int:
        return sum(1 for a in self.actions.values() if a == DELETED) if self.actions else 0

    def to_json_dict(self, *, executed: bool) -> dict:
        if self.plan is None:
            out = {"name": self.name, "path": self.path, "error": self.error, "files": [],
                   "triggers": [], "deleted": 0, "freed_bytes": 0}
            if self.not_created:
                del out["error"]
                out["not_created"] = True
                out["note"] = f"{self.path} is not a commit log yet (no {META_FILE}): a writer creates it; nothing to do"
            if self.cache is not None:
                del out["error"]
                out["cache"] = self.cache
                out["note"] = f"{self.path} is a cluster log's cache of its tier: its copies are evicted"
            if self.owned_elsewhere:
                out["owned_by"] = {"pid": self.owner_pid}
            if self.permission_denied:
                out["permission_denied"] = True
            return out
        out = self.plan.to_json_dict()
        if executed:
            for f in out["files"]:
                action = self.actions.get(f["base_offset"])
                if action is not None:
                    f["action"] = action
                    if action == HUNG:
                        f["reasons"] = [HELD]
                    if f["base_offset"] in self.errors:
                        f["error"] = self.errors[f["base_offset"]]
                elif f["base_offset"] in self.removed_by_another:
                    f["action"] = DELETED  # gone, but not by this pass: not in deleted/freed_bytes
                    f["removed_by"] = "another process"
                elif f["action"] == DELETE:
                    f["action"] = KEEP  # not reached: the pass stopped before it
                    f["reasons"] = [NOT_ATTEMPTED]
            out["deleted"] = self.deleted
            out["freed_bytes"] = self.deleted_bytes
            out["rolled"] = self.rolled
            out["paced_seconds"] = round(self.paced_seconds, 3)
            if self.unpaced:
                out["unpaced"] = self.unpaced
        if self.not_examined:
            # A pass examines only what it could delete; `retention plan` explains every segment.
            out["not_examined"] = self.not_examined
        out["stale_groups"] = list(self.plan.stale_groups)
        out["pinned"] = [{"pid": p.pid, "command": p.command, "path": p.path, "bytes": p.bytes,
                          "how": p.how} for p in self.pinned]
        out["pinned_bytes"] = pinned_bytes(self.pinned)
        if self.not_writable:
            out["not_writable"] = self.not_writable
        if self.permission_denied:
            out["permission_denied"] = True
        if self.error:
            out["error"] = self.error
        return out


@dataclass
class PassResult:
    """A whole pass (or a plan, when `executed` is False)."""

    at: datetime
    logs: list[LogPassResult]
    executed: bool
    duration: float = 0.0
    interrupted: bool = False

    @property
    def deleted(self) -> int:
        return sum(r.deleted for r in self.logs if r.actions)

    @property
    def freed_bytes(self) -> int:
        return sum(r.deleted_bytes for r in self.logs if r.deleted_bytes)

    @property
    def failed(self) -> bool:
        return any(r.error or FAILED in r.actions.values() for r in self.logs)

    def to_json_dict(self) -> dict:
        out = {"at": self.at.isoformat(), "kind": "pass" if self.executed else "plan",
               "logs": [r.to_json_dict(executed=self.executed) for r in self.logs]}
        if self.executed:
            out["interrupted"] = self.interrupted   # stopped before its last planned deletion
        return out
