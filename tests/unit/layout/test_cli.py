"""The command line is argument parsing and nothing else: each of its modules small, and argv parsed in it alone,
but by the programs the suite starts as processes of their own. Every other way in is a `dpo-bench` command."""

import ast
from pathlib import Path

import pytest

from bench.paths import PROJECT_ROOT

BENCH = PROJECT_ROOT / "bench"
CLI = BENCH / "cli"
MAX_LINES = 150

PROCESS_ENTRIES = {
    "bench/__main__.py": "`python -m bench`, the command line itself",
    "bench/worker/__main__.py": "each rank of a cell",
    "bench/worker/pipeline_step.py": "a pipeline's merge and generation processes",
    "bench/isolation/fork_server_process.py": "the run's fork server",
    "bench/isolation/fork_server_client.py": "the `python` a cell's processes run, handing over to the fork server",
    "bench/results/cpu_probe.py": "what the CPU switches on, probed in a child",
    "bench/assets/prepare_all.py": "a workload's assets prepared in a process of their own",
    "bench/assets/random_weights.py": "random weights made on a device in a process of their own",
    "bench/assets/tiny_data.py": "regenerates the committed tiny preference data (docs/scenarios.md)",
    "bench/selfbench/memory_phases.py": "the measuring child of `selfbench memory-phases`",
    "bench/selfbench/head_tiles.py": "a full-logits loss measured in a fresh process",
    "bench/selfbench/onednn_primitives.py": "the measuring child of `selfbench onednn-primitives`",
    "bench/selfbench/plain_dpo.py": "overhead's baseline, run by the interpreter of the venv under test",
}
"""Modules run as programs (`python -m`, a script path), each with who runs it: any other module is reached through
`dpo-bench`, which parses its arguments."""

PARSE_CALLS = {"parse_args", "parse_known_args", "parse_intermixed_args", "parse_known_intermixed_args"}


def relative(path: Path) -> str:
    return path.relative_to(PROJECT_ROOT).as_posix()


def is_main_guard(node: ast.AST) -> bool:
    """`if __name__ == "__main__":`"""
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    sides = [node.test.left, *node.test.comparators]
    return any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides) and any(
        isinstance(s, ast.Constant) and s.value == "__main__" for s in sides
    )


def parse_calls(tree: ast.AST) -> list[int]:
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in PARSE_CALLS
    ]


@pytest.mark.parametrize("path", sorted(CLI.glob("*.py")), ids=lambda p: p.name)
def test_a_cli_module_is_at_most_150_lines(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{relative(path)}: {lines} lines; what is not argument parsing belongs below cli/"


def test_argv_is_parsed_in_the_command_line_and_in_the_programs_the_suite_starts_only():
    found = {}
    for path in BENCH.rglob("*.py"):
        if path.is_relative_to(CLI) or relative(path) in PROCESS_ENTRIES:
            continue
        if lines := parse_calls(ast.parse(path.read_text(), str(path))):
            found[relative(path)] = lines
    assert not found, f"argv parsed outside bench/cli (lines): {found}; take typed arguments instead"


def test_the_modules_run_as_programs_are_the_listed_ones():
    programs = set()
    for path in BENCH.rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        if path.name == "__main__.py" or any(is_main_guard(node) for node in tree.body):
            programs.add(relative(path))
    assert programs == set(PROCESS_ENTRIES), (
        "a tool of the suite is a `dpo-bench` subcommand (bench/cli/selfbench.py), not a module of its own to run; "
        "list a module here only when the suite starts it as a process"
    )
