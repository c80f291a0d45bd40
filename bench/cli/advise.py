"""`advise`: which setups fit a model on some GPUs, ranked, with the smallest fix for the rest and the command that
runs the chosen one. Every figure is PREDICTED (the memory estimator's)."""

import argparse
import functools
from enum import StrEnum
from typing import TYPE_CHECKING

from bench.cli.common import add_method_argument, add_report_to_argument, write_or_print
from bench.cli.target import add_target_arguments, target, target_flags
from bench.matrix.axes import Backend, Init, Quant

if TYPE_CHECKING:
    from bench.estimate.predict import Prediction
    from bench.matrix.cell import Cell
    from bench.matrix.profiles import HardwareProfile, Workload
    from bench.report.decide_data import PointResult


def cmd_advise(args: argparse.Namespace) -> int:
    from bench.advise.advice import advise
    from bench.advise.command import run_plan, to_run
    from bench.advise.host import host_memory, require_host_memory
    from bench.advise.render import to_csv, to_json, to_markdown

    if args.export is not None:
        from bench.advise.launch_files import check_method
        from bench.matrix.scenario import parse_methods

        check_method(parse_methods(args.method))
    profile, workload, by_id, predictions = predicted(args)
    host = host_memory(profile, args.host_ram)
    require_host_memory(profile, host, predictions)
    advice = advise(profile, workload, predictions, by_id, args.prefer, host)
    chosen = to_run(advice)
    if chosen is not None:
        cell_id, change, extra = chosen
        cell = by_id.get(cell_id) or _fixed_cell(cell_id)
        advice = advice.model_copy(update={"run": run_plan(cell, profile, target_flags(args), change, extra)})
        if args.export is not None:
            export(args, cell, change, extra)
    elif args.export is not None:
        from bench.errors import BenchError

        raise BenchError("--export: no setup is predicted to fit, not even with one change; nothing to export")
    if args.format == "json":
        text = to_json(advice)
    elif args.format == "csv":
        text = to_csv(advice)
    else:
        text = to_markdown(advice, args.top or None)
    write_or_print(text, args.output)
    return 0


def export(args: argparse.Namespace, cell: "Cell", change: str | None, extra: list[str]) -> None:
    """Write the recipe of `cell` under the settings asked plus the fix's `extra` flags into --export's folder."""
    from pathlib import Path

    from bench.advise.command import native_files
    from bench.advise.launch_files import export_files, model_id, write_export
    from bench.cli.target import _say_once

    fixed = _parser().parse_args(["advise", *target_flags(args), *extra]) if extra else args
    profile, workload = target(fixed)
    model, native = model_id(args.model, workload), native_files(cell, profile)
    files = export_files(cell, profile, workload, model, native, change, report_to=args.report_to)
    folder = Path(args.export)
    write_export(folder, files)
    _say_once(f"--export: wrote {', '.join(files)} to {folder} (README.md says how to run it)")


def predicted(
    args: argparse.Namespace, matrix: "list[Cell] | None" = None
) -> "tuple[HardwareProfile, Workload, dict[str, Cell], list[Prediction]]":
    """What `advise` ranks: the profile, the workload, the cells of `--method` by id and their predictions.
    `matrix`: the expanded matrix, when the caller has it already (the decision page asks for many points)."""
    from bench.estimate.report import predict_all
    from bench.matrix.scenario import expand, load_matrix, of_methods, parse_methods, select
    from bench.matrix.settings import with_precomputed_reference

    profile, workload = target(args)
    every = expand(load_matrix()) if matrix is None else matrix
    chosen = of_axes_asked(select(of_methods(every, parse_methods(args.method)), args.filter), args)
    cells = with_precomputed_reference(chosen, workload)
    return profile, workload, {c.id: c for c in cells}, predict_all(profile, workload, cells=cells)


AXES: dict[str, type[StrEnum]] = {"init": Init, "quant": Quant, "backend": Backend}
"""The axes `advise` narrows to (`--init two_models` and the like): a Cell field and its enum."""


def of_axes_asked(cells: "list[Cell]", args: argparse.Namespace) -> "list[Cell]":
    """The cells of the --init, --quant and --backend values asked for; one line when none is left."""
    from bench.errors import BenchError
    from bench.matrix.scenario import of_axes, parse_axis

    wanted = {
        axis: None if getattr(args, axis, None) is None else parse_axis(f"--{axis}", getattr(args, axis), AXES[axis])
        for axis in AXES
    }
    narrowed = of_axes(cells, **wanted)
    if cells and not narrowed:
        asked = " ".join(f"--{axis} {','.join(v)}" for axis, v in wanted.items() if v is not None)
        raise BenchError(f"{asked}: no cell of the matrix has these values together (see `dpo-bench list`)")
    return narrowed


@functools.cache
def _parser() -> argparse.ArgumentParser:
    from bench.cli import parser

    return parser()


def advise_point(argv: list[str], matrix: "list[Cell]") -> "tuple[HardwareProfile, PointResult]":
    """One point of the decision page: what `python -m bench advise ARGV` ranks, and the flags its commands carry."""
    import shlex

    from bench.advise.advice import advise
    from bench.advise.host import host_memory, verdict
    from bench.report.decide_data import PointResult

    args = _parser().parse_args(["advise", *argv])
    profile, workload, by_id, predictions = predicted(args, matrix)
    usable = next((p.usable_bytes for p in predictions if p.usable_bytes is not None), None)
    host = host_memory(profile, args.host_ram)
    predicted_ = [p for p in predictions if p.status == "predicted"]
    host_oom = frozenset(p.cell_id for p in predicted_ if verdict(p, profile, host) == "host_oom")
    # The picks and the speeds are advise's own, over the fitting cells: the others' fixes are not on the page.
    fitting = [p for p in predicted_ if p.verdict == "fits" and p.cell_id not in host_oom]
    advice = advise(profile, workload, fitting, by_id, args.prefer, host)
    speeds = {c.cell_id: c.tokens_per_s for c in advice.cells}
    picks = tuple((p.kind, p.cell_id, p.reason) for p in advice.picks)
    return profile, PointResult(shlex.join(target_flags(args)), usable, predictions, by_id, host_oom, speeds, picks)


def _fixed_cell(cell_id: str) -> "Cell":
    """A fix's cell that is not among the advised ones: a row of the matrix the narrowing (--filter, --init, ...)
    left out (the fix changes the setup), or a precompute_ref row the matrix has no row for."""
    from bench.advise.fixes import matrix_cell

    cell = matrix_cell(cell_id)
    if cell is None:  # smallest_fix proposes matrix cells only (fixes.in_matrix)
        raise ValueError(f"the fix's cell {cell_id} is not a cell of the matrix")
    return cell


def _gigabytes(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected GB, a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of GB, got {text!r}")
    return value


def register(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser(
        "advise",
        help="PREDICTED: every setup for a model on some GPUs, ranked; the smallest fix of each that does not fit; "
        "the command to run the chosen one",
    )
    add_target_arguments(p)
    add_method_argument(p)
    narrow = p.add_argument_group("which setups to rank (default: every one)")
    narrow.add_argument("--filter", default=None, help="glob(s) over cell ids, comma-separated")
    for axis in AXES:
        narrow.add_argument(f"--{axis}", default=None, help=f"comma-separated: {', '.join(AXES[axis])}")
    p.add_argument(
        "--host-ram",
        type=_gigabytes,
        default=None,
        metavar="GB",
        help="the host memory of one node, GB, that offload cells are held against (default: the GPU catalog's "
        "typical node for the GPU, pro rata to the GPUs per node; required where the catalog has none)",
    )
    p.add_argument(
        "--prefer",
        choices=["fastest", "fewest-gpus", "faithful"],
        default="fastest",
        help="the order of the fitting setups: the most PREDICTED tokens/s over the GPUs each uses, the fewest GPUs, "
        "or the least quantized (default: %(default)s); the three picks are shown whichever is chosen",
    )
    p.add_argument("--format", choices=["md", "json", "csv"], default="md", help="json keys: docs/advise.md")
    p.add_argument("--top", type=int, default=25, help="md: rows shown (0: every cell; default: %(default)s)")
    p.add_argument("--output", default=None, help="write here instead of stdout")
    p.add_argument(
        "--export",
        default=None,
        metavar="DIR",
        help="write the recipe that trains your model in the chosen setup (launch.sh, dpo.yaml for TRL's DPO script, "
        "the accelerate/DeepSpeed configs) into DIR; `dpo.yaml`'s dataset_name is a placeholder to replace",
    )
    add_report_to_argument(p, "--export's recipe")
    p.set_defaults(func=cmd_advise)
