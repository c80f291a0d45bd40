"""Each top-level class or type alias of the package has one name that means one thing: two modules defining the
same name (three `Verdict`s once: a failure's class, a regression, a memory fit) make every import ambiguous."""

import ast
from collections import defaultdict
from pathlib import Path

from bench.paths import PROJECT_ROOT

BENCH = PROJECT_ROOT / "bench"


def defined_names(path: Path) -> set[str]:
    """Top-level classes and type aliases (a CamelCase name assigned at module level) of one module."""
    names = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.ClassDef):
            names.add(node.name)
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        for target in targets:
            if isinstance(target, ast.Name) and target.id[:1].isupper() and not target.id.isupper():
                names.add(target.id)
    return names


def definitions(root: Path = BENCH) -> dict[str, list[str]]:
    found = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        for name in defined_names(path):
            found[name].append(path.relative_to(root.parent).as_posix())
    return dict(found)


def test_no_two_modules_define_the_same_name():
    clashes = {name: tuple(paths) for name, paths in definitions().items() if len(paths) > 1}
    assert clashes == {}


def test_the_checker_sees_a_clash(tmp_path):
    package = tmp_path / "bench"
    (package / "a").mkdir(parents=True)
    (package / "a" / "one.py").write_text("class Verdict:\n    pass\n")
    (package / "two.py").write_text("from typing import Literal\n\nVerdict = Literal['fits']\nLIMIT = 1\n")
    assert definitions(package) == {"Verdict": ["bench/a/one.py", "bench/two.py"]}
