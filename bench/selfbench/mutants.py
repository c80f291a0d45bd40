"""`make mutants`: mutation testing of the modules that give verdicts: every check is shown to fail on its fault.

    python -m bench selfbench mutants [--keep] [--max-children N] [--only judge|estimate|run]

mutmut (scope and tests under `[tool.mutmut]` in pyproject.toml) changes one thing at a time in the judging modules
and runs their unit tests against each change. A survivor is a missing test or an equivalent mutant; each equivalent
one is listed with its reason in equivalent_mutants.yaml beside this file. Exits 1 on any other survivor, or on an
entry that no longer matches one. mutmut mutates only code inside functions: module-level thresholds are pinned by
tests from both sides. `--only` runs one part (SUBSETS); `--keep` reuses mutmut's results while writing tests (a
weakened test is only caught by a run without it)."""

import argparse
import fnmatch
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field

from bench.errors import BenchError
from bench.paths import PROJECT_ROOT

EQUIVALENT_FILE = Path(__file__).with_name("equivalent_mutants.yaml")
SUBSETS = {
    "judge": (("bench/judge/", "bench/report/"), ("tests/unit/judge", "tests/unit/report/")),
    "estimate": (("bench/estimate/",), ("tests/unit/estimate",)),
    "run": (
        ("bench/run/", "bench/isolation/"),
        ("tests/unit/run/", "tests/unit/isolation/"),
    ),
}
"""The parts --only selects: (path prefixes of the modules under [tool.mutmut] only_mutate, path prefixes of the
tests under its pytest_add_cli_args_test_selection)."""
KILLED = frozenset({"killed", "caught by type check", "timeout", "segfault"})
"""Statuses of a mutant the tests stopped. A timeout is a mutant that made the tests loop (mutmut's limit is 15 times
the test's own time); segfault: mutmut's name for a test process killed by a signal."""


class Equivalent(BaseModel):
    """One surviving mutant that cannot change any result, and why."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    function: str
    """Dotted module and function, e.g. bench.estimate.predict.train_terms (methods: Class.method)."""
    original: str | None = Field(default=None, alias="from")
    """The source line(s) the mutant changes, stripped, as in `mutmut show`; absent: every mutant of the function
    (for a function that only runs while its module is imported, which mutmut cannot observe)."""
    mutated: str | None = Field(default=None, alias="to")
    """The line(s) the mutant puts there; absent: every mutant of that line."""
    reason: str

    def matches(self, survivor: "Survivor") -> bool:
        return (
            self.function == survivor.function
            and (self.original is None or self.original.strip() == survivor.original.strip())
            and (self.mutated is None or self.mutated.strip() == survivor.mutated.strip())
        )


@dataclass(frozen=True)
class Survivor:
    name: str
    status: str
    function: str
    original: str
    mutated: str
    diff: str


def function_of(mutant: str) -> str:
    """bench.judge.learning.x_check__mutmut_3 -> bench.judge.learning.check; methods are named
    module.xǁClassǁmethod__mutmut_N by mutmut -> module.Class.method."""
    module, _, mangled = mutant.rpartition(".")
    mangled = mangled.rsplit("__mutmut_", 1)[0]
    if mangled.startswith("xǁ"):
        return f"{module}." + ".".join(part for part in mangled[2:].split("ǁ") if part)
    return f"{module}.{mangled.removeprefix('x_')}"


def changed_lines(diff: str) -> tuple[str, str]:
    """The removed and the added lines of a unified diff, each stripped and joined by newlines."""
    removed, added = [], []
    for line in diff.splitlines():
        if line.startswith(("---", "+++")):
            continue
        if line.startswith("-"):
            removed.append(line[1:].strip())
        elif line.startswith("+"):
            added.append(line[1:].strip())
    return "\n".join(removed), "\n".join(added)


def load_equivalents(path: Path = EQUIVALENT_FILE) -> list[Equivalent]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or []
        return [Equivalent.model_validate(entry) for entry in data]
    except (OSError, yaml.YAMLError, ValueError) as exc:
        raise BenchError(f"{path}: {' '.join(str(exc).split())}") from exc


def select(configured: Sequence[str], only: Sequence[str], part: int = 0) -> list[str]:
    """The configured paths in the named SUBSETS (all of them when none is named): module paths (part 0) or test
    paths (part 1)."""
    if not only:
        return list(configured)
    unknown = sorted(set(only) - SUBSETS.keys())
    if unknown:
        raise BenchError(f"--only {', '.join(unknown)}: not one of {', '.join(SUBSETS)}")
    prefixes = tuple(prefix for name in only for prefix in SUBSETS[name][part])
    selected = [path for path in configured if path.startswith(prefixes)]
    if not selected:
        raise BenchError(f"--only {', '.join(only)}: no path under [tool.mutmut] is in it")
    return selected


def module_of(path: str) -> str:
    """bench/judge/learning.py -> bench.judge.learning"""
    return path.removesuffix(".py").replace("/", ".")


def in_modules(function: str, modules: Iterable[str]) -> bool:
    """Whether a dotted function or mutant name belongs to one of the dotted modules."""
    return any(function.startswith(f"{module}.") for module in modules)


def explain(
    survivors: Sequence[Survivor], equivalents: Sequence[Equivalent], modules: Iterable[str] | None = None
) -> tuple[list[Survivor], list[Equivalent]]:
    """(survivors that no entry explains, entries that explain no survivor); with `modules` (dotted), an entry for a
    function outside them was not put to the test, and is not stale."""
    unexplained = [s for s in survivors if not any(e.matches(s) for e in equivalents)]
    tested = equivalents if modules is None else [e for e in equivalents if in_modules(e.function, list(modules))]
    stale = [e for e in tested if not any(e.matches(s) for s in survivors)]
    return unexplained, stale


def read_results(modules: Sequence[str]) -> tuple[dict[str, int], list[Survivor]]:
    """mutmut's recorded result of every mutant of the dotted modules (run in the project root, after `mutmut run`):
    the count per status, and every mutant the tests did not stop, with its diff."""
    from mutmut.mutation.data import SourceFileMutationData
    from mutmut.mutation.diff_apply import get_diff_for_mutant
    from mutmut.stats import status_by_exit_code
    from mutmut.utils.file_utils import walk_mutatable_files

    counts: dict[str, int] = {}
    survivors = []
    for path in walk_mutatable_files():
        data = SourceFileMutationData(path=path)
        data.load()
        for name, exit_code in data.exit_code_by_key.items():
            if not in_modules(name, modules):
                continue
            status = status_by_exit_code[exit_code]
            counts[status] = counts.get(status, 0) + 1
            if status in KILLED:
                continue
            diff = get_diff_for_mutant(name, path=path)
            original, mutated = changed_lines(diff)
            survivors.append(Survivor(name, status, function_of(name), original, mutated, diff))
    return counts, survivors


def report(counts: dict[str, int], unexplained: Iterable[Survivor], stale: Iterable[Equivalent], explained: int) -> str:
    unexplained, stale = list(unexplained), list(stale)
    lines = [f"mutants: {sum(counts.values())} ({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))})"]
    lines.append(f"survivors listed as equivalent ({EQUIVALENT_FILE.name}): {explained}")
    lines.append(f"unexplained survivors: {len(unexplained)}")
    for s in unexplained:
        lines += ["", f"# {s.name}: {s.status}", s.diff]
    for e in stale:
        lines += [
            "",
            f"stale entry in {EQUIVALENT_FILE.name} (no such surviving mutant): {e.function}: {e.original or '*'}",
        ]
    return "\n".join(lines)


def refresh_unmutated(root: Path, only_mutate: Sequence[str], source_paths: Sequence[str] | None = None) -> None:
    """mutmut copies the source tree into mutants/ once and then leaves every file it does not mutate as it was:
    bring those (every file but the `only_mutate` ones) up to date, so that a kept run tests today's code. A module
    new to `only_mutate` has the copy mutmut made while it was out of scope, which mutmut would take for one already
    mutated (it is newer than its source, and has no results beside it): that copy goes, and the module is mutated."""
    if source_paths is None:
        from mutmut.configuration import config

        source_paths = config().source_paths
    work = root / "mutants"
    for source in source_paths:
        for path in (root / source).rglob("*"):
            relative = path.relative_to(root)
            mutated = any(fnmatch.fnmatch(str(relative), pattern) for pattern in only_mutate)
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            target = work / relative
            if not mutated and target.parent.is_dir():
                shutil.copy2(path, target)
            elif mutated and not target.with_name(f"{target.name}.meta").exists():
                target.unlink(missing_ok=True)


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--keep", action="store_true", help="reuse mutants/ from the previous run")
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--only", action="append", default=[], choices=sorted(SUBSETS), help="one part of the modules")


def run(args: argparse.Namespace) -> int:
    """mutmut over the scope, then the survivors no equivalence explains: 1 when any is left."""
    os.chdir(PROJECT_ROOT)
    from mutmut.configuration import config

    equivalents = load_equivalents()
    only_mutate = select(config().only_mutate, args.only)
    tests = select(config().pytest_add_cli_args_test_selection, args.only, part=1)
    modules = [module_of(path) for path in only_mutate]
    if args.keep:
        refresh_unmutated(PROJECT_ROOT, only_mutate)
    else:
        shutil.rmtree(PROJECT_ROOT / "mutants", ignore_errors=True)
    narrowed = json.dumps({"only_mutate": only_mutate, "pytest_add_cli_args_test_selection": tests})
    run = [sys.executable, "-c", _MUTMUT_NARROWED, narrowed, "run", "--max-children", str(args.max_children)]
    if subprocess.run(run).returncode != 0:
        return _failed("mutmut run")
    counts, survivors = read_results(modules)
    if args.keep and survivors:
        if subprocess.run([*run, *(s.name for s in survivors)]).returncode != 0:
            return _failed("mutmut run of last run's survivors")
        counts, survivors = read_results(modules)
    unexplained, stale = explain(survivors, equivalents, modules)
    print(report(counts, unexplained, stale, len(survivors) - len(unexplained)))
    return 1 if unexplained or stale else 0


# mutmut reads its scope and tests from pyproject.toml only: `mutmut run` with --only's part of them put into the
# config it loaded (its worker processes are forked, and inherit it). Each mutant's tests run fastest first (mutmut
# passes them in no order, and stops at the first failure): a mutant one quick test kills no longer waits for the
# estimator's slow tests of the committed runs first; the verdict is the same, every test runs for a survivor. Relies
# on mutmut's module-level config and PytestRunner, which the lock pins.
_MUTMUT_NARROWED = """
import dataclasses, json, sys
from mutmut import configuration
from mutmut.__main__ import cli
from mutmut.runners.harness import PytestRunner
from mutmut.state import state
configuration._config = dataclasses.replace(configuration.config(), **json.loads(sys.argv[1]))
_args = PytestRunner._pytest_args_regular_run
def _fastest_first(self, tests):
    return _args(self, sorted(tests, key=lambda test: state().duration_by_test.get(test, 0.0)))
PytestRunner._pytest_args_regular_run = _fastest_first
cli(sys.argv[2:], prog_name="mutmut")
"""


def _failed(what: str) -> int:
    print(f"error: {what} failed (its output is above)", file=sys.stderr)
    return 2
