"""The packages' code stays in reader-sized pieces, read from the source with `ast`: no function
over 60 lines, no module docstring over 20 lines (a short contract; the prose lives in docs/), no
class over 300 lines. A failure names every offender with its size and where it is."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("commitlog", "policies", "retention", "storesettings")
MAX_FUNCTION_LINES = 60
MAX_MODULE_DOCSTRING_LINES = 20


def _trees() -> list[tuple[Path, ast.Module]]:
    paths = [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))]
    return [(p, ast.parse(p.read_text(), str(p))) for p in paths]


TREES = _trees()


def _where(path: Path, node: ast.AST | None = None) -> str:
    return f"{path.relative_to(ROOT)}" + (f":{node.lineno}" if node is not None else "")


def _span(node: ast.AST) -> int:
    return node.end_lineno - node.lineno + 1


def test_the_trees_cover_every_package():
    assert {p.relative_to(ROOT).parts[0] for p, _ in TREES} == set(PACKAGES)
    assert len(TREES) > 150


def test_no_function_is_longer_than_60_lines():
    long = [f"{_where(path, node)} {node.name}: {_span(node)} lines"
            for path, tree in TREES for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _span(node) > MAX_FUNCTION_LINES]
    assert not long, "functions over 60 lines:\n" + "\n".join(long)


def test_no_module_docstring_is_longer_than_20_lines():
    long = []
    for path, tree in TREES:
        doc = ast.get_docstring(tree, clean=False)
        if doc is not None and len(doc.splitlines()) > MAX_MODULE_DOCSTRING_LINES:
            long.append(f"{_where(path)}: {len(doc.splitlines())} lines")
    assert not long, "module docstrings over 20 lines (move the prose to docs/):\n" + "\n".join(long)


@pytest.mark.parametrize("source, expected", [
    ("def f():\n" + "    x = 1\n" * 60, 1),      # 61 lines: found
    ("def f():\n" + "    x = 1\n" * 59, 0),      # 60 lines: allowed
])
def test_the_function_check_counts_what_it_claims(source, expected):
    tree = ast.parse(source)
    found = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and _span(n) > MAX_FUNCTION_LINES]
    assert len(found) == expected


def test_no_class_is_longer_than_300_lines():
    long = [f"{_where(path, node)} {node.name}: {_span(node)} lines"
            for path, tree in TREES for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef) and _span(node) > 300]
    assert not long, "classes over 300 lines:\n" + "\n".join(long)
