"""What the command groups share: run ids, argument types, reading a run, writing output."""

import argparse
import sys
from pathlib import Path

from bench.errors import BenchError
from bench.matrix.axes import Method
from bench.matrix.cell import Cell
from bench.matrix.profiles import NAME_PATTERN
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


def report_to(text: str) -> tuple[str, ...]:
    from bench.worker.trackers import parse_report_to

    try:
        return parse_report_to(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--report-to: ")) from None


def add_report_to_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """`--report-to`: the trackers the trainer reports to (bench/worker/trackers.py)."""
    parser.add_argument(
        "--report-to",
        type=report_to,
        default=("none",),
        metavar="wandb|mlflow|tensorboard|trackio|none",
        help=f"the experiment trackers {what} report to (TrainingArguments.report_to; several comma-separated); "
        "default none: no tracker, no connection",
    )


def rows_added_in(scenarios: Path) -> dict:
    return rows_added(load_matrix(scenarios / "matrix.yaml"))


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
