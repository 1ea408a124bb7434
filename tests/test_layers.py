"""The package's import graph has no cycle, between modules or between packages.

Module-level imports only (what runs when a module is imported); imports under
`if TYPE_CHECKING:` are annotations and imports inside functions are deferred on purpose
(collector processes, optional backends), so neither counts. A package is trackmind's first
level (sim, game, env, agent, replay, training, ...).
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_level_imports(tree: ast.Module) -> set[str]:
    """Dotted names a module imports when it is imported (candidates, modules or not)."""
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)
                found.update(f"{node.module}.{a.name}" for a in node.names)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if isinstance(node, ast.ClassDef):
                    visit(node.body)
            elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
            else:
                for field in ("body", "orelse", "finalbody"):
                    visit(getattr(node, field, None) or [])
                for handler in getattr(node, "handlers", None) or []:
                    visit(handler.body)

    visit(tree.body)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in (SRC / "trackmind").rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        imported = module_level_imports(ast.parse(path.read_text()))
        graph[name] = {m for m in imported if m in modules and m != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_cycle_finder_on_a_hand_made_graph():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert cycles(graph) == [["a", "b", "c"]]
    tree = ast.parse(
        "import x\nfrom y import z\nif TYPE_CHECKING:\n    import t\ndef f():\n    import u\n"
    )
    assert module_level_imports(tree) == {"x", "y", "y.z"}
    assert every_import(tree) == {"x", "y", "u"}


def test_no_module_level_import_cycle():
    assert cycles(import_graph()) == []


def full_import_graph() -> dict[str, set[str]]:
    """Every import a module makes, at module level or inside a function (`from a import b`
    counts a.b when b is a module)."""
    modules = {module_name(p): p for p in (SRC / "trackmind").rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        imported = every_import(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imported |= {f"{node.module}.{a.name}" for a in node.names}
        graph[name] = {m for m in imported if m in modules and m != name}
    return graph


def test_no_import_cycle_through_function_level_imports():
    """A deferred import still ties two modules: one cannot be understood (or moved) alone."""
    assert cycles(full_import_graph()) == []


def test_the_full_graph_sees_a_function_level_cycle(tmp_path, monkeypatch):
    pkg = tmp_path / "trackmind"
    pkg.mkdir()
    (pkg / "a.py").write_text("from trackmind import b\n")
    (pkg / "b.py").write_text("def f():\n    from trackmind.a import x\n")
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    assert cycles(import_graph()) == []  # module level only: no cycle
    assert cycles(full_import_graph()) == [["trackmind.a", "trackmind.b"]]


def test_no_package_level_import_cycle():
    packages: dict[str, set[str]] = defaultdict(set)
    why: dict[tuple[str, str], str] = {}
    for module, imported in import_graph().items():
        for other in imported:
            a, b = package_of(module), package_of(other)
            if a != b:
                packages[a].add(b)
                why.setdefault((a, b), f"{module} imports {other}")
    found = cycles(dict(packages))
    detail = [why.get((a, b)) for c in found for a in c for b in c if (a, b) in why]
    assert found == [], detail


# The layers, lowest first; a package imports only from lower layers (module-level imports and
# deferred ones inside functions alike). Upward choices (the real game, Ray) are entry points
# named in trackmind.backends and imported by name when a run chooses them.
LAYERS = [
    {
        "errors",
        "defaults",
        "logs",
        "queueing",
        "backends",
        "cli",
        "conf",
        "netprobe",
        "schedules",
        "notes",
    },
    {"game"},  # the contract every game implements
    {"sim"},
    {"env", "tracking"},
    {"agent", "replay"},
    {"collectors"},  # the local processes and the Ray fleet, one CollectorPool protocol
    {"training"},
    {"tmi", "evaluation"},
    {"commands"},  # the console scripts, on top of everything
]


def every_import(tree: ast.Module) -> set[str]:
    """Modules a file imports anywhere (functions included; not annotations under
    `if TYPE_CHECKING:`), absolute imports only."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            children = node.orelse
        else:
            children = list(ast.iter_child_nodes(node))
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        for child in children:
            visit(child)

    visit(tree)
    return found


def test_imports_go_down_the_layers():
    layer = {pkg: i for i, pkgs in enumerate(LAYERS) for pkg in pkgs}
    upward = []
    for path in (SRC / "trackmind").rglob("*.py"):
        a = package_of(module_name(path))
        if a == "trackmind":
            continue
        assert a in layer, f"{a} is in no layer of LAYERS"
        for other in every_import(ast.parse(path.read_text())):
            if not other.startswith("trackmind."):
                continue
            b = package_of(other)
            up = layer[b] > layer[a] or (layer[b] == layer[a] and layer[a] > 0)
            if b != a and up:  # the base layer's small modules may use each other
                upward.append(f"{module_name(path)} imports {other}")
    assert upward == []
