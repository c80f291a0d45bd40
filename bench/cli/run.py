"""`list`, `run`, `matrix` and `images`: plan the matrix, run it on this machine, tabulate the run."""

import argparse
import functools
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bench.cli.common import (
    INTERRUPTED,
    add_method_argument,
    add_report_to_argument,
    all_cells,
    cell_timeout,
    checked_run_id,
    checked_scenario_files,
    positive,
    positive_float,
    run_id_of,
)
from bench.cli.target import add_target_arguments
from bench.errors import BenchError
from bench.executors import docker_images as images
from bench.matrix.profiles import HardwareProfile, Workload, load_profile
from bench.matrix.scenario import load_matrix, not_applicable_reason, rows_added, select, world_size
from bench.run.memory_slots import AUTO_FROM_BYTES, MAX_SLOTS, SLOT_BYTES, SPEED_CELLS, SPEED_TRIALS
from bench.worker.trackers import missing_line

if TYPE_CHECKING:
    from bench.results.env_schema import Training


def cmd_list(args: argparse.Namespace) -> int:
    checked_scenario_files(Path(args.scenarios))
    profile = load_profile(args.hw, Path(args.scenarios))
    cells = select(all_cells(args), args.filter)
    runnable = 0
    width = max(len(cell.id) for cell in cells) + 1
    for cell in cells:
        reason = not_applicable_reason(cell, profile)
        runnable += reason is None
        what = f"N/A  {reason}" if reason else f"run  {cell.launcher} x{world_size(cell, profile)}"
        print(f"{cell.id:<{width}} {what}")
    print(f"{len(cells)} cells: {runnable} to run, {len(cells) - runnable} not applicable on {profile.name}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from bench.cli.target import target
    from bench.results.env import check_resumable, training_of
    from bench.results.run_folder import open_run
    from bench.run.leftovers import clean_up_dead_runners, remove_left_fork_folders
    from bench.run.memory_slots import check_asked
    from bench.run.runner_registry import registered, sharing_notices

    started = time.monotonic()  # a --time-budget counts from here: preparing the assets is part of it
    checked_scenario_files(Path(args.scenarios))
    profile, workload = target(args)
    check_asked(profile, args.gpu_slots, args.exclusive)  # refused before the run folder is made
    if args.cell_timeout is not None:
        profile = profile.model_copy(update={"timeout_s": args.cell_timeout})
    run_id = run_id_of(args)
    select(all_cells(args), args.filter)  # refused before the run folder is made
    if why := missing_line(args.report_to):
        raise BenchError(why)  # not a failure of every cell in its trainer
    run_dir = Path(args.results) / profile.name / run_id
    # one line when the folder cannot be made or written, or another runner holds it; removed if nothing is recorded
    with open_run(Path(args.results), run_dir) as lock:
        # env.json reads and holds the training settings asked for; records without one are re-run only with --force
        check_resumable(run_dir, args.force, training_of(profile, workload), functools.partial(_defaults, args))
        if lock.dead_holder:
            print(f"notice: run {run_id} was held by runner {lock.dead_holder}, which is gone: taking it over")
        resumes_jobs = args.executor == "slurm"  # a dead runner's Slurm jobs of this run are waited for, not cancelled
        left = clean_up_dead_runners(run_dir.parent, run_dir, lock.dead_holder, resumes_jobs)
        for line in left + remove_left_fork_folders():
            print(f"cleaned up: {line}", flush=True)
        with registered(run_id, run_dir) as others:  # cells measured while another runner runs are marked
            for line in sharing_notices(others):
                print(line, flush=True)
            return _run(args, profile, workload, run_id, run_dir, started)


def _defaults(args: argparse.Namespace) -> "Training":
    """What this command's profile and workload train with when no training-setting flag is given."""
    from bench.cli.target import target
    from bench.matrix.settings import TrainingSettings
    from bench.results.env import training_of

    return training_of(*target(argparse.Namespace(**(vars(args) | dict.fromkeys(TrainingSettings.model_fields)))))


def _run(
    args: argparse.Namespace, profile: HardwareProfile, workload: Workload, run_id: str, run_dir: Path, started: float
) -> int:
    from bench.report.matrix import render
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


def write_hardware_matrix(hardware_dir: Path, scenarios: Path, run_dir: Path | None = None) -> Path:
    """MATRIX.md of a hardware folder: DPO's newest complete run (or `run_dir`) and each other method's."""
    from bench.matrix.scenario import expand
    from bench.report.matrix_file import method_runs, write_matrix
    from bench.results.runs import latest_complete_run

    matrix = load_matrix(scenarios / "matrix.yaml")
    cells, added = expand(matrix), rows_added(matrix)
    if run_dir is not None:
        return write_matrix(run_dir, [c.id for c in cells])
    runs = method_runs(hardware_dir, cells, added)
    if "dpo" not in runs:  # one line naming what is missing, as before methods were an axis
        latest_complete_run(hardware_dir, [c.id for c in cells if c.method == "dpo"], added)
    return write_matrix(runs["dpo"], [c.id for c in cells], runs)


def cmd_window(args: argparse.Namespace) -> int:
    from bench.run.window import window

    run_id = run_id_of(args)
    out = Path(args.out) if args.out else Path(args.results) / "window" / run_id
    window(args.minutes, out, run_id, args.hw, args.plan, args.gpu_slots)
    print(f"window: everything under {out}")
    return 0


def cmd_carry_assets(args: argparse.Namespace) -> int:
    from bench.assets.carried import carry_all, carry_folder
    from bench.matrix.profiles import load_workload
    from bench.run.window_spec import WINDOW_WORKLOADS

    workloads = [load_workload(name) for name in args.workloads or WINDOW_WORKLOADS]  # every name checked first
    carry_all(workloads, Path(args.out) if args.out else carry_folder())
    return 0


def cmd_images(args: argparse.Namespace) -> int:
    if not images.engine_available():
        raise BenchError(f"no docker engine answers `{images.DOCKER} info`; start dockerd first")
    started = time.monotonic()
    built = images.build_image(
        args.flavor,
        offline_base=args.offline_base,
        extra_ca_certs=args.extra_ca_certs,
        wheels=Path(args.wheels) if args.wheels else None,
    )
    print(f"built {images.image_tag(args.flavor)} ({built}) in {time.monotonic() - started:.0f} s")
    return 0


def cmd_matrix(args: argparse.Namespace) -> int:
    profile = load_profile(args.hw, Path(args.scenarios))
    hardware_dir = Path(args.results) / profile.name
    run_dir = recorded_run(hardware_dir, checked_run_id(args.run_id)) if args.run_id is not None else None
    print(f"matrix written to {write_hardware_matrix(hardware_dir, Path(args.scenarios), run_dir)}")
    return 0


def recorded_run(hardware_dir: Path, run_id: str) -> Path:
    """The folder of the run `--run-id` names; one line when it has no records (a typo would otherwise head
    MATRIX.md, its cells filled from other runs)."""
    from bench.results.layout import RESULTS_FILE
    from bench.results.runs import run_dirs

    run_dir = hardware_dir / run_id
    if (run_dir / RESULTS_FILE).is_file():
        return run_dir
    try:
        newest = [run.name for run in run_dirs(hardware_dir)[:1]]
    except BenchError:  # another run's env.json does not read: that is not this command's question
        newest = []
    raise BenchError(
        f"--run-id {run_id}: no run of {hardware_dir.name} by that name ({run_dir / RESULTS_FILE} does not exist)"
        + "".join(f"; the newest is {name}" for name in newest)
        + "; leave --run-id out for the newest complete run"
    )


def slot_count(value: str) -> int:
    number = int(value)
    if not 1 <= number <= MAX_SLOTS:
        raise argparse.ArgumentTypeError(f"must be 1 to {MAX_SLOTS}, got {number}")
    return number


def cell_count(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {number}")
    return number


def register(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser("list", help="show every cell and why some are not applicable; runs nothing")
    p.add_argument("--hw", default="cpu")
    add_method_argument(p)
    p.add_argument("--filter", default=None, help="glob(s) over cell ids, comma-separated")
    p.set_defaults(func=cmd_list)
    _register_run(sub)
    _register_window(sub)
    _register_others(sub)


def _register_run(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser("run", help="run (or resume) the matrix on this machine")
    add_target_arguments(p, hw_default="cpu")
    add_method_argument(p)
    p.add_argument("--filter", default=None, help="glob(s) over cell ids, comma-separated")
    p.add_argument(
        "--run-id",
        default=None,
        help="name of the run: resumes it when it exists (with the workload and training settings it was made with), "
        "else starts it under that name",
    )
    p.add_argument("--force", action="store_true", help="re-run cells that already have a result")
    p.add_argument(
        "--repeats",
        type=positive,
        default=1,
        help="trials per cell; compare gives throughput/memory verdicts from 4 trials per side on",
    )
    p.add_argument(
        "--time-budget",
        type=positive_float,
        default=None,
        metavar="MINUTES",
        help="stop starting cells that would end after MINUTES (counted from the command's start); cells run in "
        "coverage order, every backend, init mode, quantization, method and launcher once before anything repeats; "
        "the rest are reported as not run and a later run with --run-id resumes them",
    )
    p.add_argument(
        "--cell-timeout",
        type=cell_timeout,
        default=None,
        metavar="SECONDS",
        help="wall-clock limit of one cell (default: the profile's timeout_s)",
    )
    add_report_to_argument(p, "the cells' trainers")
    _add_how_cells_run(p)
    p.set_defaults(func=cmd_run)


def _add_how_cells_run(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--exclusive",
        action="store_true",
        help="run one cell at a time, the machine to itself (for throughput-critical work); by default cells run "
        "side by side on disjoint devices where the machine has more than a cell takes, their records saying so",
    )
    _add_slot_arguments(p)
    p.add_argument(
        "--start",
        choices=["auto", "forked", "fresh"],
        default="auto",
        help="how a cell's Python processes start: forked from one process that imported the libraries once per run "
        "(bench/isolation/zygote.py), or fresh, an interpreter each; auto: forked on CPU profiles with the local "
        "executor and no memory budget, fresh elsewhere (default)",
    )
    p.add_argument(
        "--run-predicted-oom",
        action="store_true",
        help="run the cells the memory estimator predicts to run out of memory by a clear margin (by default they "
        "are recorded `predicted_oom` with their prediction and not run)",
    )
    p.add_argument(
        "--emulate",
        action="store_true",
        help="run a smaller GPU profile on bigger GPUs: memory capped per process, devices limited; "
        "memory answers are valid, speed is not (docs/hardware.md)",
    )
    p.add_argument(
        "--executor",
        choices=["auto", "docker", "local", "slurm"],
        default="auto",
        help="where cells run: docker (a container per cell), local (a process group per cell), slurm (a batch job "
        "per cell, docs/slurm.md), auto (docker when an engine answers and the image exists or builds, else local; "
        "default)",
    )
    from bench.executors.slurm.options import add_slurm_arguments

    add_slurm_arguments(p)


def _add_slot_arguments(p: argparse.ArgumentParser) -> None:
    """How the cells share one device's memory in slots."""
    p.add_argument(
        "--gpu-slots",
        type=slot_count,
        default=None,
        metavar="N",
        help="cut the GPU's memory into N slots and run cells side by side in them, each admitted by its predicted "
        "memory with a margin and capped at its slots (a per-process memory fraction), with its share of the host's "
        "cores; with --emulate each cell is capped at its card's memory, so several 24 GB profiles' runs share one big "
        "card; on a CPU profile with memory_budget_gb the host's memory and cores the same way. Default: automatic "
        f"on a card of {AUTO_FROM_BYTES / 1e9:.0f} GB or more (one slot per {SLOT_BYTES / 2**30:.0f} GiB), else 1 "
        "(docs/hardware.md)",
    )
    p.add_argument(
        "--speed-pass",
        type=cell_count,
        default=SPEED_CELLS,
        metavar="CELLS",
        help=f"after cells ran in slots, run this many of them {SPEED_TRIALS} times each alone on the device: speed "
        "figures nothing shared (default: %(default)s; 0: none)",
    )
    p.add_argument(
        "--slot-priority",
        type=int,
        default=0,
        metavar="N",
        help="this run's priority among the runs sharing the device's slots: it takes no slot while a run of a lower "
        "N waits for one (default: %(default)s; bench/run/slot_ledger.py)",
    )
    p.add_argument(
        "--alone",
        action="store_true",
        help="in slots: each cell takes every slot of the device, through the ledger the other runs on it share "
        "(nothing beside it: a speed pass, a cell whose host memory leaves no room)",
    )


def _register_window(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser(
        "window",
        help="on a GPU lent for minutes: the card's DPO matrix, the other methods, emulated 24 GB cards, the 7B cells "
        "and a speed pass, in that priority, side by side in the card's slots, everything under --out as it ends "
        "(docs/hardware.md, 'A window on a lent GPU')",
    )
    p.add_argument("--minutes", type=positive_float, default=9.0, help="the window's deadline (default: %(default)s)")
    p.add_argument("--out", default=None, help="where everything goes (default: results/window/<run-id>)")
    p.add_argument("--run-id", default=None)
    p.add_argument(
        "--hw",
        default=None,
        help="the one-GPU profile to plan for (default: the card nvidia-smi lists), or a CPU profile with "
        "memory_budget_gb to rehearse the window on (cpu-budget)",
    )
    p.add_argument(
        "--gpu-slots",
        type=slot_count,
        default=None,
        metavar="N",
        help="the slots every phase's run cuts the card into (default: the card's automatic count, one per 24 GiB)",
    )
    p.add_argument(
        "--plan", action="store_true", help="print the plan and its PREDICTED coverage, write plan.json, run nothing"
    )
    p.set_defaults(func=cmd_window)


def _register_others(sub: "argparse._SubParsersAction") -> None:
    p = sub.add_parser(
        "carry-assets",
        help="build workloads' dataset, tokenizer and derived rows (no model) into a folder that travels with the "
        "tree to a GPU box, where prepare unpacks them (docs/hardware.md, 'A GPU box without internet')",
    )
    p.add_argument("workloads", nargs="*", help="default: the window's (bench/run/window_spec.py WINDOW_WORKLOADS)")
    p.add_argument(
        "--out", default=None, help="the carry folder (default: $BENCH_CARRIED_ASSETS, else build/carried-assets)"
    )
    p.set_defaults(func=cmd_carry_assets)

    p = sub.add_parser(
        "matrix", help="regenerate results/<HW>/MATRIX.md from the latest complete run (of DPO and of each method)"
    )
    p.add_argument("--hw", default="cpu")
    p.add_argument("--run-id", default=None)
    p.set_defaults(func=cmd_matrix)

    p = sub.add_parser("images", help="build the pinned docker image of a flavor (docs/docker.md)")
    p.add_argument("--flavor", default="cpu", choices=["cpu", "cuda"])
    p.add_argument(
        "--offline-base", action="store_true", help="build the base from Debian with debootstrap (no registry)"
    )
    p.add_argument(
        "--extra-ca-certs",
        default=None,
        metavar="auto|PATH",
        help="copy CA certificates into docker/certs/ first: auto = the host's /usr/local/share/ca-certificates",
    )
    p.add_argument(
        "--wheels",
        default=str(images.HOST_WHEELS_DIR),
        metavar="DIR",
        help="copy DIR/torch-*.whl into docker/wheelhouse/ first when DIR exists (default: %(default)s)",
    )
    p.set_defaults(func=cmd_images)
