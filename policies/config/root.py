"""The whole file: `logs:` (each log's directory, segment size and policy) and the
`RetentionConfig` that holds service, logs and policies, with the implicit `default` policy."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Annotated

from pydantic import AfterValidator, Field, ValidationInfo, WrapSerializer, field_validator, model_validator

from storesettings import SEGMENT_SIZE_DEFAULT, SEGMENT_SIZE_MAX, SEGMENT_SIZE_MIN

from policies.units import format_size
from policies.config.service import ServiceConfig
from policies.config.policy import PolicyConfig
from policies.config.fields import (ByteSize, DEFAULT_POLICY, Name, _Strict, _config_problem, _frozen_mapping,
                                    _resolve_path)


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
        path = _resolve_path(value, info)
        if path.exists() and not path.is_dir():
            raise ValueError(f"{path} exists and is not a directory; a log is a directory")
        return path


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
    policies: Policies = Field(
        default_factory=dict, validate_default=True, description="Policy name -> policy; 'default' always exists."
    )

    @field_validator("policies", mode="after")
    @classmethod
    def _add_default_policy(cls, policies: Mapping[str, PolicyConfig]) -> Mapping[str, PolicyConfig]:
        if DEFAULT_POLICY in policies:
            return policies
        return MappingProxyType({DEFAULT_POLICY: _implicit_default_policy(), **policies})

    @model_validator(mode="after")
    def _check_logs(self) -> RetentionConfig:
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
        return self

    @property
    def defined_policies(self) -> tuple[str, ...]:
        """The names of the policies the file defines (``policies`` less an implicit ``default``)."""
        return tuple(name for name, policy in self.policies.items() if policy is not _implicit_default_policy())

    def policy_for(self, log_name: str) -> PolicyConfig:
        """Return the policy of the log named ``log_name`` (KeyError if there is no such log)."""
        return self.policies[self.logs[log_name].policy]
