"""SegmentList's fields change only through its methods: no other module of the store assigns
`active`, `bases`, `leftovers` or the tail end of a segment list, or changes `bases` in place.
(`active` stays a plain attribute because every append reads it; this test is its guard.)"""

from __future__ import annotations

import ast
from pathlib import Path

STORE = Path(__file__).resolve().parents[2] / "commitlog"
FIELDS = {"active", "bases", "leftovers", "tail_end", "_active", "_bases", "_leftovers", "_tail_end"}
IN_PLACE = {"append", "pop", "remove", "insert", "clear", "extend", "sort", "add", "discard", "update"}


def _writes(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:
            if isinstance(target, ast.Attribute) and target.attr in FIELDS and not (
                    isinstance(target.value, ast.Name) and target.value.id == "self"):
                found.append(f"line {node.lineno}: assigns .{target.attr}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in IN_PLACE:
            owner = node.func.value
            if isinstance(owner, ast.Attribute) and owner.attr in FIELDS - {"active", "_active"}:
                found.append(f"line {node.lineno}: .{owner.attr}.{node.func.attr}()")
    return found


def test_no_module_but_the_segment_list_writes_its_fields():
    wrong = {}
    for path in STORE.rglob("*.py"):
        if path.name == "segment_list.py":
            continue
        found = _writes(ast.parse(path.read_text()))
        if found:
            wrong[str(path.relative_to(STORE))] = found
    assert wrong == {}


def test_the_check_sees_the_writes_it_forbids():
    code = "segs.active = None\nsegs.bases = []\nsegs.bases.pop()\nself.active = 1\nx.active.flush()\n"
    assert _writes(ast.parse(code)) == ["line 1: assigns .active", "line 2: assigns .bases", "line 3: .bases.pop()"]
