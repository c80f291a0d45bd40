"""What the command groups share: run ids, argument types, reading a run, writing output."""

import argparse
import sys
from pathlib import Path

from bench.errors import BenchError
from bench.matrix.axes import Method
from bench.matrix.cell import Cell
from bench.matrix.profiles import MAX_TIME_S, NAME_PATTERN
from bench.matrix.scenario import ALL_METHODS, expand, load_matrix, of_methods, parse_methods, rows_added

INTERRUPTED = 130
"""Exit status after a Ctrl-C (128 + SIGINT), whatever the command was doing."""


def all_cells(args: argparse.Namespace) -> list[Cell]:
    """The matrix's cells of the methods `--method` names (every method's without the option)."""
    cells = expand(load_matrix(Path(args.scenarios) / "matrix.yaml"))
    chosen = getattr(args, "method", None)
    return cells if chosen is None else of_methods(cells, parse_methods(chosen))


def cell_ids(scenarios: Path, methods: tuple[Method, ...] = (Method.DPO,)) -> list[str]:
    """The ids of the matrix's cells of `methods` (DPO's: the rows a run of the DPO matrix is held to)."""
    return [c.id for c in of_methods(expand(load_matrix(scenarios / "matrix.yaml")), methods)]


def checked_scenario_files(scenarios: Path) -> None:
    """The scenario folder's shared files read before anything is planned, whichever of them the command goes on to
    read: a broken one is one line naming it, not a traceback or a failure after the assets were prepared."""
    from bench.matrix.gpus import load_catalog
    from bench.matrix.known_issues import known_issues
    from bench.matrix.recipes import recipes

    load_matrix(scenarios / "matrix.yaml")
    known_issues(scenarios)
    recipes(scenarios)
    load_catalog(scenarios / "gpus.yaml")


def add_method_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--method",
        default=Method.DPO.value,
        help=f"training method(s) whose cells to take, comma-separated, or {ALL_METHODS} (default: %(default)s; "
        "bench/matrix/methods.py lists them)",
    )


def rows_added_in(scenarios: Path) -> dict:
    return rows_added(load_matrix(scenarios / "matrix.yaml"))


def threshold(text: str) -> float:
    """Percent: `5`, `5%` and `2.5` all mean percent of the base median."""
    try:
        value = float(text.strip().rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a percentage: {text!r} (e.g. 5 or 5%)") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"threshold must be >= 0, got {text!r}")
    return value / 100


def whole_number(flag: str, what: str, minimum: int, maximum: tuple[int, str] | None = None):
    """An argparse type: a whole number of at least `minimum` (and at most `maximum`'s number, which its words
    explain), each refusal one line naming `flag`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{flag} must be >= {minimum}, got {text!r}")
        if maximum is not None and value > maximum[0]:
            raise argparse.ArgumentTypeError(f"{flag} must be <= {maximum[0]} ({maximum[1]}), got {text!r}")
        return value

    return parse


pairs = whole_number("--pairs", "a number of pairs", 1)
cell_timeout = whole_number("--cell-timeout", "whole seconds", 10, (MAX_TIME_S, "a week"))
"""The profile schema's own bounds for a cell's time limit."""


def write_or_print(text: str, path: str | None) -> None:
    if path is None:
        sys.stdout.write(text)
        return
    out = Path(path)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise BenchError(f"{out}: cannot write ({exc.strerror or exc})") from None


def resolve_run(path: str, scenarios: Path) -> Path:
    """A run dir or results.jsonl as given; a hardware folder (results/<HW>) means its latest complete run."""
    target = Path(path)
    if not target.exists():
        raise BenchError(f"{target}: no such run dir or results file")
    if target.is_dir() and not (target / "results.jsonl").is_file() and any(target.glob("*/results.jsonl")):
        from bench.results.runs import latest_complete_run

        return latest_complete_run(target, cell_ids(scenarios), rows_added_in(scenarios))
    return target


def checked_run_id(run_id: str) -> str:
    """Run ids name a folder under results/<HW>/ and nothing else; an empty one (a script's unset variable) names no
    run, as an empty --filter names no cell."""
    if not run_id.strip():
        raise BenchError(f"--run-id {run_id!r} names no run: leave --run-id out to start a new one")
    if not NAME_PATTERN.match(run_id):
        raise BenchError(f"invalid run id {run_id!r}: use letters, digits, '_', '-', '.'")
    return run_id


def run_id_of(args: argparse.Namespace) -> str:
    """The run `--run-id` names (checked), or a new run's id when the option is left out."""
    from bench.results.store import new_run_id

    return new_run_id() if args.run_id is None else checked_run_id(args.run_id)


def positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {number}")
    return number


def positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from None
    if not number > 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return number
