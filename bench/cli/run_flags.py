"""`run`'s flags: what to run, how long, and how the cells share the machine."""

import argparse

from bench.cli.arg_types import cell_count, cell_timeout, positive, positive_float, slot_count
from bench.cli.common import add_method_argument, add_report_to_argument
from bench.cli.target_flags import add_target_arguments
from bench.run.memory_slots import AUTO_FROM_BYTES, SLOT_BYTES, SPEED_CELLS, SPEED_TRIALS
from bench.units import GB, GiB


def add_run_arguments(p: argparse.ArgumentParser) -> None:
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
        "(bench/isolation/fork_server_process.py), or fresh, an interpreter each; auto: forked on CPU profiles with "
        "the local executor and no memory budget, fresh elsewhere (default)",
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
        f"on a card of {AUTO_FROM_BYTES / GB:.0f} GB or more (one slot per {SLOT_BYTES / GiB:.0f} GiB), else 1 "
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
