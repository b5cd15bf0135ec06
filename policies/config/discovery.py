"""`discover:`: every log directory directly under a root, named by its directory, under one
policy: how a sidecar watching thousands of logs is configured (docs: configuration.md,
"Discovered logs").

Only real directories count: a symbolic link, a file, or a name that is not a log name (one
starting with `.`, say) is passed over, never followed. A named log (`logs:`) keeps its name and
its settings: a discovered directory of the same name, or the same directory, is left to it; two
roots holding one name: the first root's. `discover` reads the roots as they are now; the service
asks again each pass (`RetentionConfig.rediscovered`), so a directory appearing or vanishing is
picked up without a reload. Reads directories, writes nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType

from pydantic import Field, ValidationInfo, field_validator

from policies.config.fields import DEFAULT_POLICY, _NAME, ByteSize, Name, _directory_path, _Strict

__all__ = ["DiscoverConfig", "discover"]


class DiscoverConfig(_Strict):
    """One root whose directories are logs. Immutable."""

    root: Path = Field(
        description="Directory whose subdirectories are each a log, named by its directory; relative to the base "
        "directory. Required; must not be an existing file. Symbolic links and hidden names in it are passed over."
    )
    policy: Name = Field(default=DEFAULT_POLICY, description="Policy of every log found there; default 'default'.")
    segment_size: ByteSize | None = Field(
        default=None,
        description="Segment size the logs found there must have, as a log's segment_size; default: not checked "
        "(each log's own).",
    )

    @field_validator("root", mode="plain")
    @classmethod
    def _check_root(cls, value: object, info: ValidationInfo) -> Path:
        return _directory_path(value, info, "a root holds log directories")


def _found(entry: DiscoverConfig, strict: bool) -> Iterable[tuple[str, str]]:
    """(name, path) of each real directory directly under `entry.root` with a log's name; none when
    the root does not exist (yet), or, unless `strict`, cannot be read (OSError when `strict`)."""
    try:
        with os.scandir(entry.root) as listing:
            names = [e.name for e in listing if e.is_dir(follow_symlinks=False) and _NAME.fullmatch(e.name)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError:
        if strict:
            raise
        return []
    return [(name, os.path.join(entry.root, name)) for name in sorted(names)]


def discover(entries: Iterable[DiscoverConfig], named: Mapping[str, object],
             named_paths: Iterable[str], *, strict: bool = False) -> dict:
    """The logs found under each root of `entries`, by name, as `LogConfig` arguments (path, policy
    and segment_size when set); `named`: the names `logs:` takes, `named_paths`: their real paths.
    `strict`: a root that exists but cannot be listed (EMFILE, EIO, EACCES) raises OSError rather
    than holding no log (a root read again must not forget its logs for a failed read)."""
    taken = set(named_paths)
    found: dict[str, dict] = {}
    for entry in entries:
        real_root = os.path.realpath(entry.root)
        for name, path in _found(entry, strict):
            if name in named or name in found or os.path.join(real_root, name) in taken:
                continue
            args = {"path": Path(path), "policy": entry.policy, "overrides": MappingProxyType({})}
            if entry.segment_size is not None:
                args["segment_size"] = entry.segment_size
            found[name] = args
    return found
