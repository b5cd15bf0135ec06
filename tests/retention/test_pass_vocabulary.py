"""What a pass says of itself, declared once: its kinds and outcomes are enums each documented (the
docs' tables are generated from those documents), and every pass the scheduler starts names its
kind by a member, never a bare string; the compaction and staged-collector reasons are enums too."""

from __future__ import annotations

import ast
from pathlib import Path

from policies import COLLECTOR_REASONS, COMPACTION_REASONS, CollectorReason, CompactionReason
from retention.scheduling.metrics import (OUTCOMES, PASS_KIND_DOCS, PASS_KINDS, PASS_OUTCOME_DOCS, PassKind,
                                          PassOutcome)

ROOT = Path(__file__).resolve().parents[2]


def test_every_pass_kind_and_outcome_is_documented_once():
    assert list(PASS_KIND_DOCS) == list(PassKind) == list(PASS_KINDS)
    assert list(PASS_OUTCOME_DOCS) == list(PassOutcome) == list(OUTCOMES)
    assert all(text.strip() for text in (*PASS_KIND_DOCS.values(), *PASS_OUTCOME_DOCS.values()))
    operations = (ROOT / "docs" / "operations.md").read_text()
    assert "<!-- generated: pass-kinds -->" in operations and "<!-- generated: pass-outcomes -->" in operations


def _kind_arguments() -> list[tuple[str, int, ast.expr]]:
    """Every `kind=` keyword argument in the scheduling package's calls: (file, line, value)."""
    found = []
    for path in sorted((ROOT / "retention" / "scheduling").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                found += [(path.name, kw.value.lineno, kw.value) for kw in node.keywords if kw.arg == "kind"]
    return found


def test_every_pass_the_scheduler_starts_names_its_kind_by_a_member():
    literal = [(name, line) for name, line, value in _kind_arguments()
               if isinstance(value, ast.Constant) and isinstance(value.value, str)]
    assert not literal, f"kind given as a bare string (use PassKind): {literal}"
    members = {value.attr for _, _, value in _kind_arguments()
               if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id == "PassKind"}
    assert members == {k.name for k in PassKind}, "a declared kind no pass is started with, or the reverse"


def test_compaction_and_collector_reasons_are_enums():
    assert set(CompactionReason) <= set(COMPACTION_REASONS)
    assert tuple(CollectorReason) == COLLECTOR_REASONS
    assert all(isinstance(code, str) for code in COMPACTION_REASONS)
