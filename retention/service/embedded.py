"""The embedded configurations and the commands' exit status, shared by the CLI, the sidecar and
the demo (a module of its own, so none of them imports another for these)."""

from __future__ import annotations

import os
from importlib import resources

from policies import RetentionConfig, load_config, parse_config

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "default_config_text", "demo_config_text",
           "load", "parse"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
"""0 done; 2 the configuration or the command line is wrong; 1 anything else (a contract)."""


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
