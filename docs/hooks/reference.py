"""MkDocs hook: pages that write `<!-- generated: NAME -->` get that reference, built from the code.

One source each: the configuration reference from the pydantic models (type, unit, default, range
and doc of every field), the command-line references from the argparse parsers of `retention` and `commitlog`, the reason
codes and triggers from `policies`, the audit trail's events, abort reasons and intent actions from
`retention.audit`. A field or option added to the code is on the page at the next
build; `tests/test_docs.py` fails when one is missing.
"""

from __future__ import annotations

import argparse
import json
import re
import typing

from pydantic import BaseModel

from policies.config import BudgetConfig, BudgetLogConfig, LogConfig, PolicyConfig, ServiceConfig
from policies.config.discovery import DiscoverConfig
from policies.config import fields as value_types
from policies.reasons import REASONS
from policies.triggers import TRIGGER_DOCS
from commitlog.tool.command import EXIT_CODES as TOOL_EXIT_CODES
from commitlog.tool.command import build_parser as tool_parser
from retention.audit import ABORT_REASON_DOCS, EVENT_DOCS, INTENT_ACTION_DOCS
from retention.cli import EXIT_CODES, build_parser
from retention.scheduling.metrics import PASS_KIND_DOCS, PASS_OUTCOME_DOCS

# The value types of policies/config/fields.py, by their parser: what a user writes.
_KINDS = {
    value_types._positive_duration: "duration > 0 (`500ms`, `10s`, `5m`, `72h`, `7d`; a number is seconds)",
    value_types._non_negative_duration: "duration ≥ 0 (`0s`, `100ms`, `24h`; a number is seconds)",
    value_types._positive_size: "size > 0 in bytes (`4096`, `64KiB`, `64MiB`, `2GiB`)",
    value_types.parse_size: "size ≥ 0 in bytes (`0`, `64MiB`, `10GiB`)",
    value_types.parse_ratio: "ratio 0-1 (`0.85` or `\"85%\"`)",
    value_types._clean_ratio: "ratio 0.10-0.95 (`0.75` or `\"75%\"`)",
    value_types.parse_hours: "hours 0-23 (`[4, 5]`, `4` or `\"04;05\"`)",
    value_types._name: "name (letters, digits, `_ . -`)",
    value_types._time_zone: "IANA time zone (`UTC`, `Europe/Berlin`)",
}


def _kind(field) -> str:
    """What a user writes for ``field``, from its validators (through ``X | None``) or its type."""
    candidates = list(field.metadata)
    annotation = field.annotation
    if "BudgetLogConfig" in str(annotation):
        return "mapping of log name to `{weight, floor}`"
    for arg in typing.get_args(annotation):
        candidates.extend(getattr(arg, "__metadata__", ()))
    for meta in candidates:
        function = getattr(meta, "func", None)
        if function in _KINDS:
            return _KINDS[function]
    optional = type(None) in typing.get_args(annotation)
    if annotation is bool:
        return "boolean"
    if annotation is float:
        return "number"
    if annotation is int or (optional and int in typing.get_args(annotation)):
        return "integer"
    if typing.get_origin(annotation) is typing.Literal:
        return "one of " + ", ".join(f"`{choice}`" for choice in typing.get_args(annotation))
    if getattr(annotation, "__name__", "") == "Path":
        return "path (relative to the working directory)"
    if annotation is str or (optional and str in typing.get_args(annotation)):
        return "string"
    return "mapping of policy keys" if "Mapping" in str(annotation) else str(annotation)


def _nullable(field) -> bool:
    return type(None) in typing.get_args(field.annotation)


def _default(model: type[BaseModel], name: str) -> str:
    field = model.model_fields[name]
    if field.is_required():
        return "required"
    value = model.model_construct().model_dump(mode="json").get(name) if name != "path" else None
    if value is None:
        return "null"
    if value == {}:
        return "none"
    return f"`{json.dumps(value) if isinstance(value, (bool, list)) else value}`"


def _rows(model: type[BaseModel], prefix: str) -> list[str]:
    rows = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            rows.extend(_rows(annotation, f"{prefix}{name}."))
            continue
        kind = _kind(field) + (", or null" if _nullable(field) else "")
        doc = (field.description or "").replace("|", "\\|")
        rows.append(f"| <a id=\"{(prefix + name).replace('.', '-')}\"></a>`{prefix}{name}` | {kind} | "
                    f"{_default(model, name)} | {doc} |")
    return rows


def config_reference() -> str:
    """Every configuration key, section by section, as tables."""
    header = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    sections = [
        ("`service:`", "The sidecar process: one per file.", ServiceConfig, "service."),
        ("`logs.NAME:`", "One entry per log the scheduler looks after; `NAME` is used in metrics, "
         "`/status` and the audit trail.", LogConfig, "logs.NAME."),
        ("`discover: - ...`", "Roots whose directories are each a log, named by its directory "
         "([Discovered logs](#discovered-logs)).", DiscoverConfig, "discover[]."),
        ("`policies.NAME:`", "How the logs naming the policy are cleaned. A policy named `default` "
         "always exists (with every default below) unless the file defines its own.", PolicyConfig,
         "policies.NAME."),
        ("`budgets.NAME:`", "A byte budget shared by several logs ([Shared byte budgets](#shared-byte-budgets)).",
         BudgetConfig, "budgets.NAME."),
        ("`budgets.NAME.logs.LOG:`", "One log's part of a budget; `LOG: {}` takes every default.", BudgetLogConfig,
         "budgets.NAME.logs.LOG."),
    ]
    out = []
    for title, text, model, prefix in sections:
        out += [f"### {title}", "", text, "", *header, *_rows(model, prefix), ""]
    return "\n".join(out)


def _usage(parser: argparse.ArgumentParser) -> str:
    return " ".join(parser.format_usage().split())[len("usage: "):]


def cli_reference() -> str:
    """`retention`'s reference (see `command_reference`)."""
    return command_reference(build_parser(), EXIT_CODES)


def tool_reference() -> str:
    """`commitlog`'s reference (see `command_reference`)."""
    return command_reference(tool_parser(), TOOL_EXIT_CODES)


def command_reference(parser: argparse.ArgumentParser, exit_codes) -> str:
    """Every subcommand of `parser` with its description, usage and options; then the exit codes."""
    subparsers = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    out = []
    for name, sub in subparsers.choices.items():
        out += [f"### `{parser.prog} {name}`", "", sub.description or "", "", "```", _usage(sub), "```", "",
                "| option | meaning |", "| --- | --- |"]
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            flags = ", ".join(f"`{flag}`" for flag in action.option_strings) or f"`{action.dest}`"
            if action.metavar and action.option_strings:
                flags += f" `{action.metavar}`"
            help_text = (action.help or "").replace("|", "\\|")
            if action.default not in (None, False, [], argparse.SUPPRESS):
                help_text += f" (default: `{action.default}`)"
            out.append(f"| {flags} | {help_text} |")
        out.append("")
    out += ["### Exit codes", "", "| status | meaning |", "| --- | --- |"]
    out += [f"| `{code}` | {meaning} |" for code, meaning in exit_codes.items()]
    return "\n".join(out) + "\n"


def reason_codes() -> str:
    rows = ["| code | the segment is kept because |", "| --- | --- |"]
    rows += [f"| `{code}` | {text} |" for code, text in REASONS.items()]
    return "\n".join(rows) + "\n"


def triggers() -> str:
    rows = ["| trigger | active when |", "| --- | --- |"]
    rows += [f"| `{name}` | {text} |" for name, text in TRIGGER_DOCS.items()]
    return "\n".join(rows) + "\n"


def _table(head: str, docs) -> str:
    rows = [head, "| --- | --- |"] + [f"| `{name}` | {text} |" for name, text in docs.items()]
    return "\n".join(rows) + "\n"


def audit_events() -> str:
    return _table("| event | the line says |", EVENT_DOCS)


def abort_reasons() -> str:
    return _table("| reason | the intent did nothing because |", ABORT_REASON_DOCS)


def intent_actions() -> str:
    return _table("| action | the intent is about to |", INTENT_ACTION_DOCS)


def pass_outcomes() -> str:
    return _table("| outcome | the pass |", PASS_OUTCOME_DOCS)


def pass_kinds() -> str:
    return _table("| kind | the pass was started by |", PASS_KIND_DOCS)


_GENERATED = {"config-reference": config_reference, "cli-reference": cli_reference,
              "commitlog-cli-reference": tool_reference,
              "reason-codes": reason_codes, "triggers": triggers, "audit-events": audit_events,
              "abort-reasons": abort_reasons, "intent-actions": intent_actions,
              "pass-outcomes": pass_outcomes, "pass-kinds": pass_kinds}
_PLACEHOLDER = re.compile(r"<!-- generated: ([a-z-]+) -->")


def on_page_markdown(markdown: str, **_: object) -> str:
    def expand(match: re.Match) -> str:
        try:
            return _GENERATED[match.group(1)]()
        except KeyError:
            raise ValueError(f"unknown generated section {match.group(1)!r}; known: {sorted(_GENERATED)}") from None
    return _PLACEHOLDER.sub(expand, markdown)
