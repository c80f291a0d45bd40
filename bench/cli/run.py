"""`list` and `run`: plan the matrix, run it on this machine, tabulate the run."""

import argparse
import functools
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bench.cli.common import INTERRUPTED, add_method_argument, all_cells, checked_scenario_files, run_id_of
from bench.cli.run_flags import add_run_arguments
from bench.cli.target_flags import add_target_arguments, target
from bench.errors import BenchError
from bench.matrix.on_profile import CellOnProfile
from bench.matrix.profiles import HardwareProfile, Workload
from bench.matrix.scenario import not_applicable_reason, select
from bench.worker.trackers import missing_line

if TYPE_CHECKING:
    from bench.results.env_schema import Training


def cmd_list(args: argparse.Namespace) -> int:
    checked_scenario_files(Path(args.scenarios))
    profile, _ = target(args)
    cells = select(all_cells(args), args.filter)
    runnable = 0
    width = max(len(cell.id) for cell in cells) + 1
    for cell in cells:
        reason = not_applicable_reason(CellOnProfile(cell, profile))
        runnable += reason is None
        what = f"N/A  {reason}" if reason else f"run  {cell.launcher} x{CellOnProfile(cell, profile).world}"
        print(f"{cell.id:<{width}} {what}")
    print(f"{len(cells)} cells: {runnable} to run, {len(cells) - runnable} not applicable on {profile.name}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from bench.cli.target_flags import runnable_target
    from bench.matrix.settings import training_of
    from bench.run.memory_slots import check_asked
    from bench.run.start import taken_run

    started = time.monotonic()  # a --time-budget counts from here: preparing the assets is part of it
    checked_scenario_files(Path(args.scenarios))
    profile, workload = runnable_target(args)
    check_asked(profile, args.gpu_slots, args.exclusive)  # refused before the run folder is made
    if args.cell_timeout is not None:
        profile = profile.model_copy(update={"timeout_s": args.cell_timeout})
    run_id = run_id_of(args)
    select(all_cells(args), args.filter)  # refused before the run folder is made
    if why := missing_line(args.report_to):
        raise BenchError(why)  # not a failure of every cell in its trainer
    run_dir = Path(args.results) / profile.name / run_id
    defaults = functools.partial(_defaults, args)
    resumes_jobs = args.executor == "slurm"
    with taken_run(Path(args.results), run_dir, training_of(profile, workload), defaults, args.force, resumes_jobs):
        return _run(args, profile, workload, run_id, run_dir, started)


def _defaults(args: argparse.Namespace) -> "Training":
    """What this command's profile and workload train with when no training-setting flag is given."""
    from bench.advise.target import resolve_target
    from bench.cli.target_flags import target_request
    from bench.matrix.settings import training_of

    return training_of(*resolve_target(target_request(args).without_settings()))


def _run(
    args: argparse.Namespace, profile: HardwareProfile, workload: Workload, run_id: str, run_dir: Path, started: float
) -> int:
    from bench.report.matrix_file import write_hardware_matrix
    from bench.report.matrix_table import render
    from bench.results.runs import run_is_complete
    from bench.results.store import load_results
    from bench.run.progress import summary
    from bench.run.session import RunRequest, run_session

    matrix_cells = all_cells(args)
    cells = select(matrix_cells, args.filter)
    slurm = None
    if args.executor == "slurm":
        from bench.executors.slurm.options import slurm_executor

        slurm = functools.partial(slurm_executor, args)
    request = RunRequest(
        run_id,
        run_dir,
        profile,
        workload,
        cells,
        args.executor,
        started,
        slurm=slurm,
        emulate=args.emulate,
        start=args.start,
        force=args.force,
        repeats=args.repeats,
        time_budget_min=args.time_budget,
        exclusive=args.exclusive,
        run_predicted_oom=args.run_predicted_oom,
        gpu_slots=args.gpu_slots,
        speed_cells=args.speed_pass,
        slot_priority=args.slot_priority,
        alone=args.alone,
        report_to=args.report_to,
    )
    try:
        records = run_session(request)
    except KeyboardInterrupt:
        return INTERRUPTED  # the runner has stopped the cell and said how to resume
    selected = {c.id for c in cells}
    recorded = load_results(run_dir)
    trials = [r for r in recorded.records if r.cell_id in selected]
    print()
    print(render(trials, f"{profile.name} · run {run_id}", []))  # every trial, folded as in MATRIX.md
    print(f"summary: {summary(records)}")
    if run_is_complete(recorded.latest_by_cell(), [c.id for c in matrix_cells]):
        print(f"matrix written to {write_hardware_matrix(run_dir.parent, Path(args.scenarios))}")
    else:
        print(f"run {run_id} covers part of the matrix; {run_dir.parent / 'MATRIX.md'} left as it was")
    return 0


def register(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser(
        "list", help="show every cell and why some are not applicable; runs nothing (takes run's target flags)"
    )
    add_target_arguments(p, hw_default="cpu")
    add_method_argument(p)
    p.add_argument("--filter", default=None, help="glob(s) over cell ids, comma-separated")
    p.set_defaults(func=cmd_list)
    p = sub.add_parser("run", help="run (or resume) the matrix on this machine")
    add_run_arguments(p)
    p.set_defaults(func=cmd_run)
