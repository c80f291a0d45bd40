"""Byte units live in bench/units.py: its formatter, and no other module defining a unit of its own."""

import ast

import pytest

from bench.paths import PROJECT_ROOT
from bench.units import GB, GiB, MiB, bytes_text

BENCH = PROJECT_ROOT / "bench"
UNIT_NAMES = {"KB", "MB", "GB", "KiB", "MiB", "GiB", "KIB", "MIB", "GIB"}
NOT_YET: set[str] = set()
"""Files another branch is rewriting that still write 2**20 themselves."""


@pytest.mark.parametrize(
    ("value", "args", "kwargs", "text"),
    [
        (1372.5 * MiB, ("MiB", 1), {}, "1,372.5 MiB"),
        (812 * MiB, ("MiB", 0), {}, "812 MiB"),
        (-12 * MiB, ("MiB", 0), {"sign": True}, "-12 MiB"),
        (12 * MiB, ("MiB", 0), {"sign": True}, "+12 MiB"),
        (1.5 * GiB, ("GiB", 2), {}, "1.50 GiB"),
        (24 * GB, ("GB", 1), {}, "24.0 GB"),
        (2500 * MiB, ("MiB", 0), {"suffix": False}, "2,500"),
        (None, ("GB", 1), {}, "—"),
    ],
)
def test_bytes_text(value, args, kwargs, text):
    assert bytes_text(value, *args, **kwargs) == text


def _unit_definitions(path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Assign):
            found += [f"{t.id} = (line {node.lineno})" for t in node.targets if getattr(t, "id", None) in UNIT_NAMES]
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Pow)
            and getattr(node.left, "value", None) == 2
            and getattr(node.right, "value", None) in (10, 20, 30)
        ):
            found.append(f"2**{node.right.value} (line {node.lineno})")
    return found


def test_no_module_but_units_defines_a_byte_unit():
    offenders = {}
    for path in sorted(BENCH.rglob("*.py")):
        name = path.relative_to(PROJECT_ROOT).as_posix()
        if name != "bench/units.py" and (found := _unit_definitions(path)):
            offenders[name] = found
    assert set(offenders) == NOT_YET, offenders


def test_the_checker_sees_a_unit(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("GB = 1e9\nLIMIT = 10 * 2**20\n")
    assert _unit_definitions(module) == ["GB = (line 1)", "2**20 (line 2)"]
