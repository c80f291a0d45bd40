"""`advise`: which setups fit a model on some GPUs, ranked, with the smallest fix for the rest and the command that
runs the chosen one. Every figure is PREDICTED (the memory estimator's)."""

import argparse
import functools
from typing import TYPE_CHECKING

from bench.advise.question import AXES, PREFERENCES, Question
from bench.cli.common import add_method_argument, add_report_to_argument, write_or_print
from bench.cli.generation_flags import check_online
from bench.cli.target_flags import add_target_arguments, target_request

if TYPE_CHECKING:
    from bench.matrix.cell import Cell


def question_of(args: argparse.Namespace) -> Question:
    """The question the flags ask."""
    axes = {axis: getattr(args, axis, None) for axis in AXES}
    return Question(target_request(args), args.method, args.filter, **axes, host_ram=args.host_ram, prefer=args.prefer)


def cmd_advise(args: argparse.Namespace) -> int:
    from bench.advise.advice import advise
    from bench.advise.command import run_plan, to_run
    from bench.advise.host import host_memory
    from bench.advise.question import fixed_cell, predicted
    from bench.advise.render import to_csv, to_json, to_markdown

    if args.export is not None:
        from bench.advise.launch_files import check_method
        from bench.matrix.scenario import parse_methods

        check_method(parse_methods(args.method))
    check_online(args)
    question = question_of(args)
    profile, workload, by_id, predictions = predicted(question)
    host = host_memory(profile, args.host_ram)
    advice = advise(profile, workload, predictions, by_id, args.prefer, host)
    chosen = to_run(advice)
    if chosen is not None:
        cell_id, change, extra = chosen
        cell = by_id.get(cell_id) or fixed_cell(cell_id)
        advice = advice.model_copy(update={"run": run_plan(cell, profile, question.target.flags(), change, extra)})
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
    """Write the launch files of `cell` under the settings asked plus the fix's `extra` flags into --export's folder."""
    from pathlib import Path

    from bench.advise.command import native_files
    from bench.advise.launch_files import export_files, model_id, write_export
    from bench.advise.target import resolve_target, say_once

    asked = target_request(args)
    fixed = target_request(_parser().parse_args(["advise", *asked.flags(), *extra])) if extra else asked
    profile, workload = resolve_target(fixed)
    model, native = model_id(args.model, workload), native_files(cell, profile)
    files = export_files(cell, profile, workload, model, native, change, report_to=args.report_to)
    folder = Path(args.export)
    write_export(folder, files)
    say_once(f"--export: wrote {', '.join(files)} to {folder} (README.md says how to run it)")


@functools.cache
def _parser() -> argparse.ArgumentParser:
    from bench.cli import parser

    return parser()


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
        choices=PREFERENCES,
        default=PREFERENCES[0],
        help="the order of the fitting setups: the most PREDICTED tokens/s over the GPUs each uses, the fewest GPUs, "
        "or the most faithful (full fine-tuning, LoRA, 8-bit, 4-bit) (default: %(default)s); the picks, per method, "
        "are shown whichever is chosen",
    )
    p.add_argument("--format", choices=["md", "json", "csv"], default="md", help="json keys: docs/advise.md")
    p.add_argument("--top", type=int, default=25, help="md: rows shown (0: every cell; default: %(default)s)")
    p.add_argument("--output", default=None, help="write here instead of stdout")
    p.add_argument(
        "--export",
        default=None,
        metavar="DIR",
        help="write the launch files that train your model in the chosen setup (launch.sh, dpo.yaml for TRL's DPO "
        "script, the accelerate/DeepSpeed configs) into DIR; `dpo.yaml`'s dataset_name is a placeholder to replace",
    )
    add_report_to_argument(p, "--export's launch files")
    p.set_defaults(func=cmd_advise)
