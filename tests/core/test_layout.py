"""The package's shape, checked on its source: no import cycle among gpuwait's modules, core
free of the packages built on it, the verdict reading windows only through the collectors'
accessors, and each shared fact declared in one place."""

from __future__ import annotations

import ast
import pathlib

import pytest

from gpuwait.core.registry import registry

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "exporter" / "gpuwait"


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def imported(name: str, tree: ast.AST) -> set[str]:
    """The gpuwait modules ``name`` imports anywhere in its file: at module level, in
    functions, under ``if TYPE_CHECKING`` alike. ``from package import name`` counts as an
    import of the submodule when ``name`` is one, else of the package. The implicit import
    of a module's parent packages is not an edge: a package's __init__ importing its own
    submodules is how a package is built; it turns into a cycle only when a submodule
    imports the package back, and that import is an edge of its own."""
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
    return {m for m in found if m in MODULES and m != name}


GRAPH = {name: imported(name, tree) for name, tree in TREES.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), or a self-import."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
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

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_the_imports():
    assert "gpuwait.core.config" in GRAPH["gpuwait.collectors.cpu.window"]
    assert "gpuwait.collectors.diskstats.window" in GRAPH["gpuwait.analysis.evidence.storage"]
    assert "gpuwait.analysis.metrics" in GRAPH["gpuwait.core.registry"]
    # function-level imports count too
    assert "gpuwait.core.registry" in GRAPH["gpuwait.diagnose"]


def test_cycle_detection_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle():
    assert cycles(GRAPH) == []


@pytest.mark.parametrize("layer", ["gpuwait.collectors", "gpuwait.analysis", "gpuwait.exposition", "gpuwait.catalog"])
def test_core_builds_on_nothing_above_it(layer):
    offenders = {name: sorted(m for m in deps if m == layer or m.startswith(layer + "."))
                 for name, deps in GRAPH.items()
                 if name.startswith("gpuwait.core.") and name != "gpuwait.core.registry"}
    assert not {name: deps for name, deps in offenders.items() if deps}


def test_a_collector_imports_no_other_collector_nor_the_analysis():
    for name, deps in GRAPH.items():
        if not name.startswith("gpuwait.collectors."):
            continue
        own = ".".join(name.split(".")[:3])
        foreign = sorted(m for m in deps if m.startswith("gpuwait.collectors.") and not m.startswith(own)
                         or m.startswith(("gpuwait.analysis", "gpuwait.exposition", "gpuwait.core.registry")))
        assert not foreign, (name, foreign)


def test_the_verdict_reads_windows_only_through_the_collectors_accessors():
    """A window's columns are keyed by whatever the collector that writes them chose: only
    that collector's window.py may look them up."""
    for name, tree in TREES.items():
        if not name.startswith("gpuwait.analysis"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("columns", "column", "series"):
                pytest.fail(f"{name}:{node.lineno} reads a window column directly ({node.attr})")


def test_each_collector_owns_its_options_and_registers_nothing():
    for collector in registry():
        for option in collector.options:
            assert option.name.startswith(("collector.", "verdict.")), option.name
    sources = "\n".join(path.read_text() for path in MODULES.values())
    assert "register_option" not in sources


#: Names of facts used in several places: each is assigned in gpuwait.core.facts only.
SHARED_FACTS = ("CAUSES", "EVIDENCE_ORDER", "WAIT_CAUSES", "PCIE_LANE_BYTES_PER_SECOND", "PCIE_LANE_BYTES",
                "CLOCK_EVENT_REASONS", "CLOCK_LIMIT_BITS", "CLOCK_LIMIT_REASONS")


def test_shared_facts_are_declared_once():
    where: dict[str, list[str]] = {}
    for name, tree in TREES.items():
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            for target in targets:
                if isinstance(target, ast.Name) and target.id in SHARED_FACTS:
                    where.setdefault(target.id, []).append(name)
    assert where and all(modules == ["gpuwait.core.facts"] for modules in where.values()), where
