"""`advise`: which setups fit a model on some GPUs, ranked, with the smallest fix for the rest and the command that
runs the chosen one. Every figure is PREDICTED (the memory estimator's)."""

import argparse
import functools
from typing import TYPE_CHECKING

from bench.cli.common import add_method_argument, write_or_print
from bench.cli.target import add_target_arguments, target, target_flags

if TYPE_CHECKING:
    from bench.estimate.predict import Prediction
    from bench.matrix.cell import Cell
    from bench.matrix.profiles import HardwareProfile, Workload
    from bench.report.decide_data import PointResult


def cmd_advise(args: argparse.Namespace) -> int:
    from bench.advise.advice import advise
    from bench.advise.command import run_plan, to_run
    from bench.advise.render import to_csv, to_json, to_markdown

    profile, workload, by_id, predictions = predicted(args)
    advice = advise(profile, workload, predictions, by_id)
    chosen = to_run(advice)
    if chosen is not None:
        cell_id, change, extra = chosen
        cell = by_id.get(cell_id) or _fixed_cell(advice, cell_id, by_id)
        advice = advice.model_copy(update={"run": run_plan(cell, profile, target_flags(args), change, extra)})
    if args.format == "json":
        text = to_json(advice)
    elif args.format == "csv":
        text = to_csv(advice)
    else:
        text = to_markdown(advice, args.top or None)
    write_or_print(text, args.output)
    return 0


def predicted(
    args: argparse.Namespace, matrix: "list[Cell] | None" = None
) -> "tuple[HardwareProfile, Workload, dict[str, Cell], list[Prediction]]":
    """What `advise` ranks: the profile, the workload, the cells of `--method` by id and their predictions.
    `matrix`: the expanded matrix, when the caller has it already (the decision page asks for many points)."""
    from bench.estimate.report import predict_all
    from bench.matrix.scenario import expand, load_matrix, of_methods, parse_methods
    from bench.matrix.settings import with_precomputed_reference

    profile, workload = target(args)
    every = expand(load_matrix()) if matrix is None else matrix
    cells = with_precomputed_reference(of_methods(every, parse_methods(args.method)), workload)
    return profile, workload, {c.id: c for c in cells}, predict_all(profile, workload, cells=cells)


@functools.cache
def _parser() -> argparse.ArgumentParser:
    from bench.cli import parser

    return parser()


def advise_point(argv: list[str], matrix: "list[Cell]") -> "tuple[HardwareProfile, PointResult]":
    """One point of the decision page: what `python -m bench advise ARGV` ranks, and the flags its commands carry."""
    import shlex

    from bench.report.decide_data import PointResult

    args = _parser().parse_args(["advise", *argv])
    profile, _, by_id, predictions = predicted(args, matrix)
    usable = next((p.usable_bytes for p in predictions if p.usable_bytes is not None), None)
    return profile, PointResult(shlex.join(target_flags(args)), usable, predictions, by_id)


def _fixed_cell(advice, cell_id: str, by_id: dict):
    """A fix's cell that is not among the advised ones (e.g. a precompute_ref row the matrix has no row for)."""
    from bench.advise.fixes import smallest_fix  # noqa: F401  (the fix was found there; rebuild it from its id)
    from bench.matrix.axes import Option

    base = cell_id.replace(f"+{Option.PRECOMPUTE_REF}", "")
    cell = by_id[base]
    return cell.model_copy(update={"options": tuple(sorted({*cell.options, Option.PRECOMPUTE_REF}))})


def register(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser(
        "advise",
        help="PREDICTED: every setup for a model on some GPUs, ranked; the smallest fix of each that does not fit; "
        "the command to run the chosen one",
    )
    add_target_arguments(p)
    add_method_argument(p)
    p.add_argument("--format", choices=["md", "json", "csv"], default="md", help="json keys: docs/advise.md")
    p.add_argument("--top", type=int, default=25, help="md: rows shown (0: every cell; default: %(default)s)")
    p.add_argument("--output", default=None, help="write here instead of stdout")
    p.set_defaults(func=cmd_advise)
