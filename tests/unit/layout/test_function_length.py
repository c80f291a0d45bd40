"""No function of the package runs over MAX_LINES lines (issue 39): a longer one does several jobs, and its
sections are functions of their own."""

import ast
from pathlib import Path

from bench.paths import PROJECT_ROOT

MAX_LINES = 60


def long_functions(root: Path, limit: int = MAX_LINES) -> list[str]:
    """`path:function (N lines)` for each function or method over `limit` lines, nested ones included."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    found.append(f"{path.relative_to(root.parent).as_posix()}:{node.name} ({lines} lines)")
    return found


def test_no_function_runs_over_the_limit():
    assert long_functions(PROJECT_ROOT / "bench") == []


def test_the_checker_sees_a_long_function(tmp_path):
    package = tmp_path / "bench"
    package.mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES))
    (package / "long.py").write_text(f"def short():\n    pass\n\n\ndef long():\n{body}")
    assert long_functions(package) == [f"bench/long.py:long ({MAX_LINES + 1} lines)"]
