"""What every audit writer can write is declared once and documented.

The writers (every module of `retention` that writes intents, outcomes or lines of its own) are read
as source: each event, abort reason and intent action they can put in a line is collected from the
places a line gets it (an outcome's event, an intent's action, a `reason`, a record type), resolved
through the module's own names, and must be a member of the audit vocabulary and appear on the
pages that document the trail (rendered by the docs' hook, as `make docs` renders them).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
from pathlib import Path

import retention.audit as audit

ROOT = Path(__file__).resolve().parents[2]
_WRITE_CALLS = {"intent", "outcome", "outcome_or_log", "note_or_log"}
_REASON_CALLS = {"aborted", "_abort", "of"}     # the reason is their third argument


def _rendered(page: str) -> str:
    spec = importlib.util.spec_from_file_location("docs_reference_hook", ROOT / "docs" / "hooks" / "reference.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    return hook.on_page_markdown((ROOT / "docs" / page).read_text())


def _name(func: ast.expr) -> str | None:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _imports_audit(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[-1] == "audit" for n in ast.walk(tree))


def _writers() -> dict[str, ast.Module]:
    """Module name -> syntax tree of every module that writes audit lines."""
    out = {}
    for path in sorted((ROOT / "retention").rglob("*.py")):
        tree = ast.parse(path.read_text())
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        calls = {_name(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
        events = any(isinstance(n, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == "event"
                                                     for k in n.keys) for n in ast.walk(tree))
        if calls & _WRITE_CALLS or (events and _imports_audit(tree)) or name == "retention.audit.trail":
            out[name] = tree
    return out


class _Written:
    """What one writer can put in a line: resolved values, and the literal strings it uses."""

    def __init__(self, module_name: str, tree: ast.Module) -> None:
        self.names = vars(importlib.import_module(module_name))
        self.events: set = set()
        self.reasons: set = set()
        self.actions: set = set()
        self.literal_reasons: set = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                self._call(node)
            elif isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values):
                    if isinstance(key, ast.Constant) and key.value == "event":
                        self._add(self.events, value)
                    elif isinstance(key, ast.Constant) and key.value == "reason":
                        self._reason(value)
            value = self._resolve(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
            if isinstance(value, audit.AbortReason if hasattr(audit, "AbortReason") else ()):
                self.reasons.add(value)
            if isinstance(value, type) and isinstance(getattr(value, "EVENT", None), str):
                self.events.add(value.EVENT)     # a record type that carries its event

    def _call(self, node: ast.Call) -> None:
        name = _name(node.func)
        if name in ("outcome", "outcome_or_log") and len(node.args) >= 2:
            self._add(self.events, node.args[1])
        if name == "intent" and node.args:
            self._add(self.actions, node.args[0])
        for keyword in node.keywords:
            if keyword.arg == "reason":
                self._reason(keyword.value)
        if name in _REASON_CALLS and len(node.args) >= 3:
            self._reason(node.args[2])

    def _reason(self, node: ast.expr) -> None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            self.literal_reasons.add(node.value)
            self.reasons.add(node.value)
        else:
            self._add(self.reasons, node)

    def _add(self, found: set, node: ast.expr) -> None:
        value = node.value if isinstance(node, ast.Constant) else self._resolve(node)
        if isinstance(value, str):
            found.add(value)

    def _resolve(self, node: ast.expr) -> object:
        if isinstance(node, ast.Name):
            return self.names.get(node.id)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            return getattr(self.names.get(node.value.id), node.attr, None)
        return None


def _everything_written() -> dict[str, _Written]:
    return {name: _Written(name, tree) for name, tree in _writers().items()}


def test_the_writers_are_found():
    writers = set(_writers())
    assert {"retention.deletion.audited_removal", "retention.compaction.compactor", "retention.compaction.intents",
            "retention.archiving.uploader", "retention.archiving.expiry", "retention.archiving.staged_collector",
            "retention.archiving.cluster_cache", "retention.deletion.clockguard", "retention.audit.trail"} <= writers


def test_every_abort_reason_a_writer_can_write_is_declared_documented_and_no_literal():
    written = _everything_written()
    page = _rendered("troubleshooting.md")
    reasons = set().union(*(w.reasons for w in written.values()))
    undeclared = {(name, r) for name, w in written.items() for r in w.reasons if r not in audit.ABORT_REASONS}
    assert not undeclared, f"abort reasons written but not declared in retention.audit: {sorted(undeclared)}"
    literals = {(name, r) for name, w in written.items() for r in w.literal_reasons}
    assert not literals, f"abort reasons written as strings, not AbortReason members: {sorted(literals)}"
    assert reasons == set(audit.ABORT_REASONS), "declared abort reasons no writer writes"
    for reason in reasons:
        assert f"`{reason}`" in page, f"abort reason {reason!r} is not on docs/troubleshooting.md"


def test_every_event_and_intent_action_a_writer_can_write_is_declared_and_documented():
    written = _everything_written()
    page = _rendered("operations.md")
    events = set().union(*(w.events for w in written.values()))
    actions = set().union(*(w.actions for w in written.values()))
    assert events == set(audit.EVENTS)
    declared_actions = set(getattr(audit, "INTENT_ACTIONS", ()))
    assert actions and actions <= declared_actions, sorted(actions - declared_actions)
    assert actions == declared_actions, "declared intent actions no writer announces"
    for word in events | actions:
        assert f"`{word}`" in page, f"{word!r} is not on docs/operations.md"


def test_the_vocabulary_is_one_enum_each_with_a_doc_and_json_keeps_the_values():
    from policies import reasons, triggers
    from retention.scheduling import problems

    assert set(audit.EVENT_DOCS) == set(audit.Event) and set(audit.EVENTS) == set(audit.Event)
    assert set(audit.ABORT_REASON_DOCS) == set(audit.AbortReason) == set(audit.ABORT_REASONS)
    assert set(audit.INTENT_ACTION_DOCS) == set(audit.IntentAction)
    assert set(reasons.REASONS) - {reasons.UNCONSUMED_PREFIX + "GROUP"} == set(reasons.Reason)
    assert set(triggers.TRIGGER_DOCS) == set(triggers.Trigger) and triggers.TRIGGERS == tuple(triggers.Trigger)
    assert reasons.ACTIONS == tuple(reasons.Action) and problems.KINDS == tuple(problems.ProblemKind)
    assert reasons.HELD is reasons.Reason.HELD and triggers.MANUAL is triggers.Trigger.MANUAL
    assert audit.AbortReason.HELD == reasons.HELD        # one word, two vocabularies: the same value
    line = json.dumps({"event": audit.Event.ABORTED, "reason": audit.AbortReason.NO_ROOM,
                       "triggers": [triggers.Trigger.SIZE_CAP], "because": [reasons.Cause.EXPIRED]})
    assert line == '{"event": "aborted", "reason": "no-room", "triggers": ["size-cap"], "because": ["expired"]}'
