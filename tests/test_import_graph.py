"""The packages' import graph, read from the source with `ast` (every import, at module level or
inside a function): no cycles, dependencies pointing one way (retention -> policies, retention ->
commitlog; commitlog and policies import neither each other nor retention), and pyspark imported
only inside commitlog.spark."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("commitlog", "policies", "retention", "storesettings")


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, modules: set[str]) -> set[str]:
    """Every module name `name` imports (absolute, after resolving relative imports). `from pkg
    import sub` depends on `pkg.sub` alone when `sub` is a module of ours, else on `pkg` itself."""
    is_package = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            subs = {f"{module}.{alias.name}" for alias in node.names}
            out.update(subs & modules)
            if subs - modules:
                out.add(module)
                out.update(subs)      # names outside our packages (pyspark.sql...) kept for the rules
    return out


def _graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(edges between our modules, every imported name per module)."""
    modules = _modules()
    raw = {name: _imports(name, path, set(modules)) for name, path in modules.items()}
    edges = {name: {m for m in imported if m in modules and m != name} for name, imported in raw.items()}
    return edges, raw


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def _top(module: str) -> str:
    return module.split(".")[0]


def test_the_graph_is_read_from_every_package():
    edges, _ = _graph()
    assert {"commitlog", "policies", "retention", "retention.scheduling.scheduler", "policies.pressure"} <= set(edges)
    assert "policies.pressure" in edges["retention.scheduling.pressure_watch"]     # a real edge is seen


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_imports_resolve_relative_names_and_submodules(tmp_path):
    source = tmp_path / "demo.py"
    source.write_text("from . import record as rec\n"
                      "def late():\n    from .cli import default_config_text\n"
                      "from pyspark.sql import SparkSession\n")
    ours = {"retention", "retention.cli", "retention.record", "retention.demo"}
    found = _imports("retention.demo", source, ours)
    assert {"retention.record", "retention.cli", "pyspark.sql"} <= found
    assert "retention" not in found        # `from . import record` needs the submodule only


def test_no_import_cycles_in_commitlog_policies_retention():
    edges, _ = _graph()
    assert _cycles(edges) == []


def test_dependencies_point_one_way():
    _, raw = _graph()
    wrong = []
    for module, imported in raw.items():
        forbidden = {"commitlog": {"policies", "retention"}, "policies": {"commitlog", "retention"},
                     "storesettings": {"commitlog", "policies", "retention"}}.get(_top(module), set())
        wrong += [f"{module} imports {m}" for m in sorted(imported) if _top(m) in forbidden]
    assert wrong == []


def test_the_retention_engine_imports_no_integration():
    # Integrations plug in through retention.compaction.protection's entry points.
    _, raw = _graph()
    wrong = [f"{module} imports {m}" for module, imported in raw.items() for m in sorted(imported)
             if module.startswith("retention") and m.startswith("commitlog.spark")]
    assert wrong == []


# Each room (sub-package) may import only itself, the rooms listed, and the base modules of its
# package (retention.audit, a package of base modules; commitlog's top-level modules; commitlog.spark's
# shared modules).
_ROOMS = {
    "commitlog.segments": set(),
    "commitlog.append": {"commitlog.segments"},
    "commitlog.cleanup": {"commitlog.segments"},
    "commitlog.spark.ledger": set(),
    "commitlog.spark.writing": {"commitlog.spark.ledger"},
    "commitlog.spark.reading": {"commitlog.spark.ledger"},
    "commitlog.spark.jvm": {"commitlog.spark.reading"},
    "commitlog.spark.cluster": set(),
    "retention.deletion": set(),
    "retention.compaction": {"retention.deletion"},
    "retention.scheduling": {"retention.deletion", "retention.compaction"},
    "retention.web": {"retention.scheduling", "retention.deletion", "retention.compaction"},
}


def _room(module: str) -> str | None:
    return next((room for room in _ROOMS if module == room or module.startswith(room + ".")), None)


def test_rooms_import_only_the_rooms_below_them():
    edges, _ = _graph()
    wrong = []
    for module, imported in edges.items():
        room = _room(module)
        if room is None:
            continue
        for m in sorted(imported):
            other = _room(m)
            if other is not None and other != room and other not in _ROOMS[room]:
                wrong.append(f"{module} imports {m}")
    assert wrong == []


def test_no_package_folder_holds_more_than_twenty_modules():
    crowded = {}
    for package in PACKAGES:
        for folder in [ROOT / package, *(p for p in (ROOT / package).rglob("*") if p.is_dir())]:
            modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
            if len(modules) > 20:
                crowded[str(folder.relative_to(ROOT))] = len(modules)
    assert crowded == {}



def test_no_module_name_is_used_twice_across_the_packages():
    # A reader told "see writer.py" or "state.py" should find one file, not guess between rooms.
    seen: dict[str, list[str]] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if path.name not in ("__init__.py", "__main__.py"):    # Python's own names
                seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}


def test_only_commitlog_spark_imports_pyspark():
    _, raw = _graph()
    wrong = [f"{module} imports {m}" for module, imported in raw.items() for m in sorted(imported)
             if _top(m) == "pyspark" and not module.startswith("commitlog.spark")]
    assert wrong == []
