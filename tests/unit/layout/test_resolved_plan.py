"""A cell on a profile is resolved once (bench/matrix/plan.py) and the Plan handed on: few functions take a cell and a
profile side by side, each a place where the two arrive from outside or an N/A rule that the Plan is made from.
Read with `ast`; a parameter counts by its name (`cell`, `profile`) or its annotation (`Cell`, `HardwareProfile`)."""

import ast
from pathlib import Path

from bench.paths import PROJECT_ROOT

BENCH = PROJECT_ROOT / "bench"

CEILING = 5
"""The functions that may take both: `plan_for` itself, the estimator's `predict_cell`, advise's command
(`run_plan`, `native_files`) and its export files (`export_files`). The N/A rules take a `CellOnProfile`
(bench/matrix/on_profile.py); a new function should take a Plan or a CellOnProfile."""


def _kinds(arg: ast.arg) -> set[str]:
    """ "cell" and/or "profile" where the parameter is one (a list of cells is not a cell)."""
    spelled = ast.unparse(arg.annotation).replace('"', "").replace("'", "") if arg.annotation is not None else ""
    typed = spelled.removesuffix(" | None")
    found = set()
    if arg.arg == "cell" or typed == "Cell":
        found.add("cell")
    if arg.arg == "profile" or typed == "HardwareProfile":
        found.add("profile")
    return found


def taking_cell_and_profile(root: Path = BENCH) -> list[str]:
    """`path:function` of every function under `root` with a cell parameter and a profile parameter."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            args = node.args
            kinds = set().union(*(_kinds(a) for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)))
            if {"cell", "profile"} <= kinds:
                found.append(f"{path.relative_to(root.parent)}:{node.name}")
    return found


def test_few_functions_take_a_cell_and_a_profile():
    found = taking_cell_and_profile()
    assert len(found) <= CEILING, "take a Plan (bench/matrix/plan.py) instead:\n" + "\n".join(found)


def test_the_counter_sees_both_spellings(tmp_path):
    package = tmp_path / "bench"
    package.mkdir()
    (package / "m.py").write_text(
        "def named(cell, profile): ...\n"
        "def typed(c: Cell, p: 'HardwareProfile'): ...\n"
        "def one(cell, workload): ...\n"
        "def planned(plan: Plan): ...\n"
    )
    assert taking_cell_and_profile(package) == ["bench/m.py:named", "bench/m.py:typed"]
