"""The package's import graph, read with `ast` (function-level and TYPE_CHECKING imports included): no circles, no
import back up the layers, and the worker and executors keep to their side (docs/architecture.md)."""

import ast
from functools import cache
from pathlib import Path

import networkx as nx

from bench.paths import PROJECT_ROOT

BENCH = PROJECT_ROOT / "bench"

LAYERS = (
    ("errors", "files", "file_cache", "paths", "secrets", "units", "install"),
    ("matrix", "launchers"),
    ("assets", "isolation", "results"),
    ("worker",),
    ("executors",),
    ("judge", "estimate"),
    ("run", "pipeline", "advise"),
    ("report", "selfbench"),
    ("cli", "__main__"),
)
"""Lowest first: a module may import its own layer's folders and any below, never one above."""

FORBIDDEN = {
    "worker": ("executors", "run", "pipeline", "report", "cli", "judge", "selfbench"),
    "executors": ("worker", "judge", "report", "pipeline"),
}
"""What each side must not know: the worker runs inside every rank and needs none of the host's machinery; an
executor starts processes and knows nothing of what they train."""


def module_name(path: Path) -> str:
    parts = path.relative_to(PROJECT_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(p): p for p in BENCH.rglob("*.py")}


def imported(path: Path) -> set[str]:
    """Every bench module `path` imports, wherever the import statement stands."""
    known = modules()
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        else:
            continue
        for name in names:
            if name in known and name.startswith("bench"):
                found.add(name)
    return found


def graph() -> nx.DiGraph:
    g = nx.DiGraph()
    for name, path in modules().items():
        g.add_node(name)
        for target in imported(path) - {name}:
            # a package's own __init__ is not an edge back into it (`from bench.cli import report` from bench.cli)
            if not name.startswith(target + ".") and target != "bench":
                g.add_edge(name, target)
    return g


def folder(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "bench"


def layer(name: str) -> int:
    top = folder(name)
    return next(i for i, group in enumerate(LAYERS) if top in group) if top != "bench" else 0


def test_every_folder_has_a_layer():
    assert {folder(n) for n in modules()} - {"bench"} <= {f for group in LAYERS for f in group}


def test_no_import_circles():
    circles = [sorted(c) for c in nx.strongly_connected_components(graph()) if len(c) > 1]
    assert circles == []


def test_no_import_runs_back_up_the_layers():
    upward = [(a, b) for a, b in graph().edges if layer(b) > layer(a)]
    assert upward == []


def test_worker_and_executors_keep_to_their_side():
    crossing = [(a, b) for a, b in graph().edges if folder(b) in FORBIDDEN.get(folder(a), ())]
    assert crossing == []


def test_executors_know_nothing_of_trl():
    for name, path in modules().items():
        if folder(name) == "executors":
            tree = ast.parse(path.read_text())
            roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
            roots |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
            assert not roots & {"trl", "peft", "transformers"}, name


def test_the_checker_sees_a_circle_and_an_upward_import(tmp_path):
    """The rules above can fail: a function-level import closing a loop is found, and so is an upward edge."""
    a = tmp_path / "a.py"
    a.write_text("def f():\n    from bench.run.runner import execute\n")
    assert "bench.run.runner" in imported(a)
    g = graph()
    g.add_edge("bench.run.runner", "bench.matrix.axes")
    g.add_edge("bench.matrix.axes", "bench.run.runner")
    assert any(len(c) > 1 for c in nx.strongly_connected_components(g))
    assert layer("bench.run.runner") > layer("bench.matrix.axes")
