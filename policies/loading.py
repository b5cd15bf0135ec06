"""Loading a configuration from YAML, and turning the first problem in it into one line.

``load_config`` / ``parse_config`` read YAML once (keeping the node tree for line numbers), reject
duplicate keys, validate with the models of :mod:`policies.config` and report the first problem in
the file as ``FILE:LINE: KEY.PATH: reason`` through :class:`~policies.config.ConfigError`. Pure
functions over their input (only ``load_config`` reads a file), so thread-safe.
"""

from __future__ import annotations

import difflib
import os
import typing
from collections.abc import Mapping
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from policies.config import ConfigError, RetentionConfig
from policies.yaml_bounds import MAX_CONFIG_BYTES, BoundedLoader
from policies.units import describe_kind, describe_value, shown

__all__ = ["load_config", "parse_config"]


def load_config(path: str | os.PathLike[str], *, base_dir: str | os.PathLike[str] | None = None) -> RetentionConfig:
    """Read and validate the YAML file at ``path``; raise :class:`ConfigError` on any problem.

    Relative log and audit paths resolve against ``base_dir`` (default: the current directory).
    """
    source = os.fspath(path)
    try:
        # Opened without blocking, so a FIFO nobody writes opens at once (and then reads as empty).
        descriptor = os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        os.set_blocking(descriptor, True)
        with open(descriptor, "rb") as stream:
            data = stream.read(MAX_CONFIG_BYTES + 1)
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError("is not UTF-8 text", source=source) from None
    except (OSError, ValueError) as error:   # ValueError: a path with a NUL in it
        raise ConfigError(f"cannot read the file: {getattr(error, 'strerror', None) or error}", source=source) from None
    if len(data) > MAX_CONFIG_BYTES:
        raise _too_large(source)
    return parse_config(text, source=source, base_dir=base_dir)


def parse_config(
    text: str, *, source: str = "<string>", base_dir: str | os.PathLike[str] | None = None
) -> RetentionConfig:
    """Validate the YAML ``text``; ``source`` names it in errors. See :func:`load_config`."""
    root, data = _read_yaml(text, source)
    if root is None or data is None:
        raise ConfigError("the configuration is empty; expected a mapping with service, logs and policies", source=source)
    if not isinstance(data, dict):
        raise ConfigError(
            f"the top level must be a mapping with service, logs and policies, got {describe_kind(data)}",
            source=source,
            line=root.start_mark.line + 1,
        )
    context = {"base_dir": os.fspath(base_dir) if base_dir is not None else os.getcwd()}
    try:
        return RetentionConfig.model_validate(data, context=context)
    except ValidationError as error:
        raise _first_problem(error, root, source) from None


def _read_yaml(text: str, source: str) -> tuple[yaml.Node | None, object]:
    """Parse once, keeping both the node tree (for line numbers) and the plain data."""
    if len(text) > MAX_CONFIG_BYTES:
        raise _too_large(source)
    loader = None
    try:
        loader = BoundedLoader(text)
        root = loader.get_single_node()
        if root is None:
            return None, None
        # Before constructing: a `<<` merge copies the merged keys into the node, beside its own.
        _reject_duplicate_keys(root, (), source)
        return root, loader.construct_document(root)
    except yaml.reader.ReaderError as error:   # raised before any mark exists: count the lines ourselves
        line = text.count("\n", 0, error.position) + 1
        raise ConfigError(f"invalid YAML: the character U+{error.character:04X} is not allowed in YAML text",
                          source=source, line=line) from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        detail = _yaml_problem(error.problem, error.context)
        line = mark.line + 1 if mark is not None else None
        raise ConfigError(f"invalid YAML: {detail}", source=source, line=line) from None
    except yaml.YAMLError as error:
        raise ConfigError(f"invalid YAML: {error}", source=source) from None
    finally:
        if loader is not None:
            loader.dispose()


def _too_large(source: str) -> ConfigError:
    return ConfigError(f"is larger than {MAX_CONFIG_BYTES // 1024} KiB; a configuration is a few KiB", source=source)


def _yaml_problem(problem: str | None, context: str | None) -> str:
    """PyYAML splits a message into context and problem; put them back into one readable phrase."""
    if problem and context:
        return f"{context}, {problem}" if problem.startswith("but ") else f"{problem} ({context})"
    return problem or context or "cannot be parsed"


def _reject_duplicate_keys(
    node: yaml.Node, path: tuple[str, ...], source: str, visited: set[int] | None = None
) -> None:
    # PyYAML keeps the last of two equal keys silently; an operator who wrote both meant one of them.
    visited = set() if visited is None else visited
    # An alias shares its anchor's node; visiting each node once keeps alias-heavy files linear.
    if id(node) in visited:
        return
    visited.add(id(node))
    if isinstance(node, yaml.MappingNode):
        first_lines: dict[str, int] = {}
        for key, value in node.value:
            if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
                continue
            line = key.start_mark.line + 1
            if key.value in first_lines:
                raise ConfigError(
                    f"duplicate key (first at line {first_lines[key.value]})",
                    source=source,
                    line=line,
                    key_path=_format_key_path((*path, key.value)),
                )
            first_lines[key.value] = line
            _reject_duplicate_keys(value, (*path, key.value), source, visited)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _reject_duplicate_keys(item, (*path, f"[{index}]"), source, visited)


def _first_problem(error: ValidationError, root: yaml.Node, source: str) -> ConfigError:
    """Turn the error that comes first in the file into a ConfigError."""
    problems = []
    for order, detail in enumerate(error.errors(include_url=False)):
        location, reason = _describe_error(detail)
        line = _line_of(root, location)
        problems.append((line is None, line or 0, order, location, reason, line))
    _, _, _, location, reason, line = min(problems, key=lambda problem: problem[:3])
    return ConfigError(reason, source=source, line=line, key_path=_format_key_path(location))


def _describe_error(detail: Mapping[str, Any]) -> tuple[tuple[str | int, ...], str]:
    """Return the key location and the plain-words reason of one pydantic error."""
    location = tuple(part for part in detail["loc"] if part != "[key]")
    kind = detail["type"]
    context = detail.get("ctx") or {}
    given = describe_value(detail.get("input"))
    if kind == "config":
        return (*location, *context.get("key", ())), context["reason"]
    if kind == "value_error":
        return location, str(context.get("error", detail["msg"]))
    if "[key]" in detail["loc"] or kind == "invalid_key":
        return location, f"a key must be a string, got {describe_value(location[-1] if location else None)}"
    if kind == "extra_forbidden":
        return location, _unknown_key_reason(location)
    if kind == "missing":
        return location, "is required"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return location, f"expected an integer, got {given}"
    if kind == "bool_type":
        return location, f"expected true or false, got {given}"
    if kind == "string_type":
        return location, f"expected a string, got {given}"
    if kind in ("dict_type", "model_type", "model_attributes_type", "mapping_type"):
        return location, f"expected a mapping, got {given}"
    if kind == "literal_error":
        return location, f"expected one of {context.get('expected')}, got {given}"
    if kind == "greater_than":
        bound = context.get("gt")
        return location, f"must be {'positive' if bound == 0 else f'greater than {bound}'}, got {shown(detail.get('input'))}"
    return location, str(detail["msg"])


def _unknown_key_reason(location: tuple[str | int, ...]) -> str:
    allowed = _allowed_keys(location[:-1])
    if not allowed:
        return "unknown key"
    unknown = str(location[-1]) if location else ""
    close = difflib.get_close_matches(unknown, allowed, n=1, cutoff=0.75)
    if close:
        return f"unknown key (did you mean {close[0]!r}?)"
    return f"unknown key; expected one of {', '.join(allowed)}"


def _allowed_keys(location: tuple[str | int, ...]) -> list[str]:
    """The keys the model at ``location`` accepts, found by walking the model classes."""
    model: type[BaseModel] = RetentionConfig
    parts = list(location)
    while parts:
        field = model.model_fields.get(str(parts.pop(0)))
        if field is None:
            return []
        target = field.annotation
        if typing.get_origin(target) in (Mapping, dict):
            target = typing.get_args(target)[1]
            if not parts:
                return []
            parts.pop(0)
        if not (isinstance(target, type) and issubclass(target, BaseModel)):
            return []
        model = target
    return list(model.model_fields)


def _line_of(root: yaml.Node, location: tuple[str | int, ...]) -> int | None:
    """Line of the deepest key of ``location`` present in the file (its nearest ancestor if missing)."""
    node, line = root, None
    for part in location:
        if isinstance(node, yaml.MappingNode):
            match = next(
                ((key, value) for key, value in node.value if isinstance(key, yaml.ScalarNode) and key.value == str(part)),
                None,
            )
            if match is None:
                break
            line, node = match[0].start_mark.line + 1, match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def _format_key_path(location: tuple[str | int, ...]) -> str:
    # Sequence positions arrive already written as "[i]"; every other part is a mapping key.
    text = ""
    for part in map(str, location):
        text += part if part.startswith("[") or not text else f".{part}"
    return text
