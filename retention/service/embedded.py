"""The embedded configurations and the commands' exit status, shared by the CLI, the sidecar and
the demo (a module of its own, so none of them imports another for these)."""

from __future__ import annotations

import os
from types import MappingProxyType
from importlib import resources

from policies import RetentionConfig, load_config, parse_config

__all__ = ["EXIT_CODES", "EXIT_FAILED", "EXIT_OK", "EXIT_UNREACHABLE", "EXIT_USAGE", "default_config_text", "demo_config_text",
           "load", "parse"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
EXIT_CODES = MappingProxyType({
    EXIT_OK: "done (`status`: the sidecar is healthy)",
    EXIT_FAILED: "failed: a pass, a compaction or a request failed, or a log could not be read (`check`: a log "
    "or the audit trail the user running it may not read or write); for `status`, the sidecar is unhealthy",
    EXIT_USAGE: "the command line or the configuration is wrong: one line on stderr names the file, line, "
    "key and reason; nothing ran",
    EXIT_UNREACHABLE: "the sidecar named by `--url` cannot be reached (refused, timed out, unknown host)",
})
"""Every exit status of the `retention` command (a contract scripts rely on)."""


def default_config_text() -> str:
    return resources.files("retention").joinpath("conf/retention.yaml").read_text()


def demo_config_text() -> str:
    return resources.files("retention").joinpath("conf/demo.yaml").read_text()


def load(path: str | None) -> RetentionConfig:
    """The configuration at `path`, or the embedded default (relative paths: the working dir)."""
    if path is None:
        return parse(default_config_text(), source="<embedded conf/retention.yaml>")
    return load_config(path)


def parse(text: str, *, source: str) -> RetentionConfig:
    """Configuration `text` (relative paths: the working dir)."""
    return parse_config(text, source=source, base_dir=os.getcwd())
