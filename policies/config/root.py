"""The whole file: `logs:` (each log's directory, segment size and policy) and the
`RetentionConfig` that holds service, logs and policies, with the implicit `default` policy."""

from __future__ import annotations

import functools
import os
import time
from functools import cached_property
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any

from pydantic import (AfterValidator, Field, PrivateAttr, ValidationError, ValidationInfo, WrapSerializer,
                      field_validator, model_validator)

from storesettings import SEGMENT_SIZE_DEFAULT, SEGMENT_SIZE_MAX, SEGMENT_SIZE_MIN

from policies.units import format_size
from policies.config.service import ServiceConfig
from policies.config.policy import PolicyConfig
from policies.config.budgets import Budgets
from policies.config.discovery import DiscoverConfig, discover
from policies.config.fields import (ByteSize, DEFAULT_POLICY, Name, _Strict, _config_problem, _frozen_mapping,
                                    _directory_path)


def _frozen_tree(value: Any) -> Any:
    """Mappings inside ``value`` made read-only, all the way down (overrides stay as written)."""
    if isinstance(value, Mapping):
        return MappingProxyType({key: _frozen_tree(item) for key, item in value.items()})
    return value


def _plain_tree(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _plain_tree(item) for key, item in value.items()}
    return value


Overrides = Annotated[Mapping[str, Any], AfterValidator(_frozen_tree),
                      WrapSerializer(lambda value, handler: _plain_tree(value))]


class LogConfig(_Strict):
    """One commit log the scheduler looks after. Immutable."""

    path: Path = Field(
        description="Directory of the log; relative to the base directory. Required; must not be an existing "
        "file, and two logs may not share it."
    )
    segment_size: ByteSize = Field(
        default=SEGMENT_SIZE_DEFAULT,
        description="Bytes of each preallocated segment file: an integer or '64MiB' (B, KiB, MiB, GiB). "
        "From 4KiB to 4GiB - 1 B (the store's limits, storesettings); default 64MiB.",
    )
    policy: Name = Field(default=DEFAULT_POLICY, description="Name of the policy in policies; default 'default'.")
    overrides: Overrides = Field(
        default_factory=dict,
        description="Policy keys this log sets otherwise, in place (reserve: 1h, disk: {clean_ratio: 0.6}); "
        "a section merges key by key. Validated as the policy is; default none.",
    )

    @field_validator("segment_size", mode="after")
    @classmethod
    def _check_segment_size(cls, value: int) -> int:
        if not SEGMENT_SIZE_MIN <= value <= SEGMENT_SIZE_MAX:
            bound = (f"at least {format_size(SEGMENT_SIZE_MIN)}" if value < SEGMENT_SIZE_MIN
                     else f"at most {format_size(SEGMENT_SIZE_MAX)}")
            raise ValueError(f"must be {bound} (the store's limit), got {value} bytes")
        return value

    @field_validator("path", mode="plain")
    @classmethod
    def _check_path(cls, value: object, info: ValidationInfo) -> Path:
        return _directory_path(value, info, "a log is a directory")


Logs = Annotated[
    Mapping[Name, LogConfig], AfterValidator(_frozen_mapping), WrapSerializer(lambda value, handler: handler(dict(value)))
]


Policies = Annotated[
    Mapping[Name, PolicyConfig],
    AfterValidator(_frozen_mapping),
    WrapSerializer(lambda value, handler: handler(dict(value))),
]


@functools.cache
def _implicit_default_policy() -> PolicyConfig:
    """The one ``default`` policy added to a file without its own (told apart by identity)."""
    return PolicyConfig()


class RetentionConfig(_Strict):
    """The whole configuration file. Immutable; ``logs`` and ``policies`` are read-only mappings.

    A policy named ``default`` with every default value exists unless the file defines its own, so a
    file without a ``policies`` section works.
    """

    service: ServiceConfig = Field(
        default_factory=dict, validate_default=True, description="The sidecar process settings."
    )
    logs: Logs = Field(default_factory=dict, validate_default=True, description="Log name -> log settings.")
    discover: Annotated[list[DiscoverConfig], AfterValidator(tuple),
                        WrapSerializer(lambda value, handler: handler(list(value)))] = Field(
        default_factory=tuple, description="Roots whose directories are each a log, named by its directory, "
        "beside the named logs (which keep a name or directory found there too); default none.",
    )
    policies: Policies = Field(
        default_factory=dict, validate_default=True, description="Policy name -> policy; 'default' always exists."
    )
    budgets: Budgets = Field(
        default_factory=dict, validate_default=True,
        description="Budget name -> a byte budget shared by several logs; default none.",
    )

    @field_validator("policies", mode="after")
    @classmethod
    def _add_default_policy(cls, policies: Mapping[str, PolicyConfig]) -> Mapping[str, PolicyConfig]:
        if DEFAULT_POLICY in policies:
            return policies
        return MappingProxyType({DEFAULT_POLICY: _implicit_default_policy(), **policies})

    _effective: dict[str, PolicyConfig] = PrivateAttr(default_factory=dict)
    _discovered: dict[str, str] = PrivateAttr(default_factory=dict)      # name -> path of each log found
    _roots_seen: list = PrivateAttr(default_factory=list)                 # the roots' stats when read

    @model_validator(mode="after")
    def _check_logs(self, info: ValidationInfo) -> RetentionConfig:
        if self.discover:
            self._add_discovered()
        seen: dict[str, str] = {}
        for name, log in self.logs.items():
            if log.policy not in self.policies:
                defined = ", ".join(sorted(self.policies))
                raise _config_problem(f"undefined policy {log.policy!r}; defined: {defined}", "logs", name, "policy")
            # realpath also catches two spellings (or a symlink) of one directory.
            real = os.path.realpath(log.path)
            if real in seen:
                raise _config_problem(f"is already the path of log {seen[real]!r} ({log.path})", "logs", name, "path")
            seen[real] = name
            if log.overrides:
                self._effective[name] = _overridden(self.policies[log.policy], log.overrides, name)
        archived: dict[tuple[str, str], str] = {}
        for name, log in self.logs.items():
            url = (self._effective.get(name) or self.policies[log.policy]).archive.url
            if url is None:
                continue
            # A log's objects sit under its directory's name, where a reader with its path finds them.
            key = (url.rstrip("/"), log.path.name)
            if key in archived:
                raise _config_problem(f"archives to {url} under the name {log.path.name!r}, as log "
                                      f"{archived[key]!r} does: give one another directory name or archive url",
                                      "logs", name, "path")
            archived[key] = name
        self._check_budgets((info.context or {}).get("vanished", frozenset()))
        return self

    def _check_budgets(self, vanished: frozenset[str]) -> None:
        """Each budget's logs are logs of the file, each in one budget at most. `vanished`: the
        budgets' discovered logs not found when the roots are read again (`rediscovered`): a budget
        keeps their names, counting them for nothing until they come back (refusing the new
        configuration would keep out every other change of the roots)."""
        member: dict[str, str] = {}
        for budget_name, budget in self.budgets.items():
            for log in budget.logs:
                if log not in self.logs and log not in vanished:
                    defined = ", ".join(sorted(self.logs)) or "none"
                    raise _config_problem(f"unknown log {log!r}; defined: {defined}", "budgets", budget_name,
                                          "logs", log)
                if log in member:
                    raise _config_problem(f"log {log!r} is already in budget {member[log]!r}; a log is in one "
                                          f"budget at most", "budgets", budget_name, "logs", log)
                member[log] = budget_name

    @cached_property
    def budget_of(self) -> Mapping[str, str]:
        """By log name, the budget it is in (logs in none are absent)."""
        return MappingProxyType({log: name for name, budget in self.budgets.items() for log in budget.logs})

    def budget_partners(self, names: Iterable[str]) -> list[str]:
        """``names`` and, after them, every other log of the budgets they are in (in file order): a
        budget's logs are decided together."""
        names = list(names)
        budgets = {self.budget_of[n] for n in names if n in self.budget_of}
        wanted = set(names)
        return names + [log for b in self.budgets if b in budgets for log in self.budgets[b].logs
                        if log not in wanted and log in self.logs]

    def _add_discovered(self) -> None:
        """The logs under the `discover` roots, added to `logs` (frozen: set once, here)."""
        for i, entry in enumerate(self.discover):
            if entry.policy not in self.policies:
                defined = ", ".join(sorted(self.policies))
                raise _config_problem(f"undefined policy {entry.policy!r}; defined: {defined}", "discover", i, "policy")
        self._roots_seen[:] = _root_stats(self.discover)
        found = discover(self.discover, self.logs, [os.path.realpath(log.path) for log in self.logs.values()])
        self._discovered.update({name: str(args["path"]) for name, args in found.items()})
        logs = {name: LogConfig.model_construct(set(args) - {"overrides"}, **args) for name, args in found.items()}
        object.__setattr__(self, "logs", MappingProxyType({**self.logs, **logs}))

    @property
    def discovered(self) -> frozenset[str]:
        """The names of the logs found under the `discover` roots (not named in `logs`)."""
        return frozenset(self._discovered)

    def rediscovered(self) -> RetentionConfig | None:
        """This configuration with its `discover` roots read again, or None when they hold the same
        directories (a root whose mtime has not changed, and not racily, is not listed again).
        OSError when a root exists but cannot be listed: read again next time."""
        stats = _root_stats(self.discover)
        if not self.discover or (None not in stats and stats == self._roots_seen):
            return None
        named = {name: log for name, log in self.logs.items() if name not in self._discovered}
        found = discover(self.discover, named, [os.path.realpath(log.path) for log in named.values()], strict=True)
        if {name: str(args["path"]) for name, args in found.items()} == self._discovered:
            self._roots_seen[:] = stats
            return None
        data = self.model_dump(mode="json", exclude={"logs": set(self._discovered)})
        if self.policies.get(DEFAULT_POLICY) is _implicit_default_policy():
            data["policies"].pop(DEFAULT_POLICY)
        budgeted = {log for budget in self.budgets.values() for log in budget.logs}
        vanished = frozenset(budgeted.difference(named, found))   # each was a log when the file was loaded
        return type(self).model_validate(data, context={"base_dir": os.sep, "vanished": vanished})

    @property
    def defined_policies(self) -> tuple[str, ...]:
        """The names of the policies the file defines (``policies`` less an implicit ``default``)."""
        return tuple(name for name, policy in self.policies.items() if policy is not _implicit_default_policy())

    @cached_property
    def policies_in_force(self) -> Mapping[str, PolicyConfig]:
        """By log name, the policy in force for it: its policy with its ``overrides`` applied.
        Resolved once (a pass asks for every log's several times; private attributes are slow)."""
        effective = self._effective
        return MappingProxyType({name: effective.get(name) or self.policies[log.policy]
                                 for name, log in self.logs.items()})

    def policy_for(self, log_name: str) -> PolicyConfig:
        """Return the policy in force for the log named ``log_name``: its policy with the log's
        ``overrides`` applied (KeyError if there is no such log)."""
        return self.policies_in_force[log_name]


def _root_stats(entries) -> list:
    """(inode, mtime_ns) of each root, None for one unreadable or changed within two seconds (read again)."""
    now = time.time_ns()
    stats = []
    for entry in entries:
        try:
            st = os.stat(entry.root)
        except OSError:
            stats.append(None)
            continue
        stats.append((st.st_ino, st.st_mtime_ns) if now - st.st_mtime_ns > 2_000_000_000 else None)
    return stats


def _merged(base: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in changes.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


# A policy's schedule: its jobs run per policy, so a log cannot time them differently.
SCHEDULE_KEYS = (("interval",), ("disk_check_interval",), ("manual_passes",), ("compaction", "interval"),
                 ("hung", "retry_every"))


def _overridden(policy: PolicyConfig, overrides: Mapping[str, Any], log_name: str) -> PolicyConfig:
    """``policy`` with ``overrides`` applied and validated as a policy is; the first problem is
    blamed on its key under ``logs.LOG.overrides``."""
    for path in SCHEDULE_KEYS:
        section = overrides if len(path) == 1 else overrides.get(path[0])
        if isinstance(section, Mapping) and path[-1] in section:
            raise _config_problem("is the policy's schedule, shared by its logs: give this log a policy "
                                  "of its own to change it", "logs", log_name, "overrides", *path)
    try:
        return PolicyConfig.model_validate(_merged(policy.model_dump(), overrides))
    except ValidationError as exc:
        detail = exc.errors(include_url=False)[0]
        location = tuple(str(part) for part in detail["loc"])
        context = detail.get("ctx") or {}
        if detail["type"] == "extra_forbidden":
            reason = "unknown policy key"
        elif detail["type"] == "config":
            location, reason = (*location, *context.get("key", ())), context["reason"]
        else:
            reason = str(context.get("error", detail["msg"]))
        raise _config_problem(reason, "logs", log_name, "overrides", *location) from None
