"""The `commitlog` command's reference page is generated from its parser (docs/hooks/reference.py),
as `retention`'s is: every subcommand, option and exit status is on it."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

from commitlog.tool.command import EXIT_CODES, build_parser

ROOT = Path(__file__).resolve().parents[3]


def _hook():
    spec = importlib.util.spec_from_file_location("reference_hook", ROOT / "docs" / "hooks" / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_page_asks_for_the_reference_and_it_names_every_subcommand_option_and_exit_status():
    page = (ROOT / "docs" / "commitlog-cli.md").read_text()
    assert "<!-- generated: commitlog-cli-reference -->" in page
    text = _hook().on_page_markdown(page)
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in subparsers.choices.items():
        assert f"### `commitlog {name}`" in text
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            for flag in action.option_strings:
                assert f"`{flag}`" in text, (name, flag)
    assert all(f"| `{code}` |" in text for code in EXIT_CODES)
    assert "commitlog-cli.md" in (ROOT / "mkdocs.yml").read_text()
