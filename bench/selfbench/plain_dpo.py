"""One DPO cell as a plain TRL script, without the suite: the baseline of bench/selfbench/overhead.py.

The worker's own TRL trainer (bench/worker/build.py `trl_trainer`: the same models, trainer arguments, tokenizer
and dataset) in one process, without the suite's launcher, rank reports, step recorder, memory probes or engagement
check; its own minimal timing: wall clock and TRL's cumulative num_tokens between the end of the warm-up steps and
the end of training (the suite's tokens_per_s definition).

    python -m bench selfbench plain-dpo [--cell one_adapter-none-single] [--hw cpu]   # prints one JSON line
"""

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

from bench.assets.prepare import cell_dataset, prepare
from bench.errors import BenchError
from bench.isolation.fork_server_client import FRESH_ENV
from bench.matrix.axes import Backend
from bench.matrix.cell import Cell
from bench.matrix.methods import method_spec
from bench.matrix.plan import plan_for
from bench.matrix.profiles import load_profile, load_workload
from bench.matrix.scenario import expand, load_matrix
from bench.worker.build import import_libraries, trl_trainer
from bench.worker.spec import WorkerSpec


class SteadyClock(TrainerCallback):
    """Step-end times; TRL's token count at the end of step warmup+1 and of the last step."""

    def __init__(self, warmup_steps: int) -> None:
        self.warmup_steps = warmup_steps
        self.trainer: Any = None
        self.ends: list[float] = []
        self.cpu: list[float] = []
        self.marks: list[tuple[float, int]] = []

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
        self.ends.append(time.perf_counter())
        self.cpu.append(time.process_time())
        if state.global_step == self.warmup_steps + 1 or state.global_step == state.max_steps:
            self.marks.append((self.ends[-1], int(self.trainer._total_train_tokens)))


def matrix_cell(cell_id: str) -> Cell | None:
    """The matrix's cell with this id (the ids the suite runs), None when there is none."""
    return next((cell for cell in expand(load_matrix()) if cell.id == cell_id), None)


def steady_speed(spec: WorkerSpec) -> dict[str, Any]:
    """Train the cell once; its steady-state speed."""
    train = spec.workload.train
    clock = SteadyClock(train.warmup_steps)
    trainer = trl_trainer(spec, [clock])
    clock.trainer = trainer
    trainer.train()
    (start, start_tokens), (end, end_tokens) = clock.marks
    logged = [entry["num_tokens"] for entry in trainer.state.log_history if "num_tokens" in entry]
    steady = clock.ends[train.warmup_steps :]
    cpu = clock.cpu[train.warmup_steps :]
    return {
        "cell": spec.cell.id,
        "tokens_per_s": (end_tokens - start_tokens) / (end - start),
        "step_time_median_s": statistics.median([b - a for a, b in itertools.pairwise(steady)]),
        "cpu_s_per_step_median": statistics.median([b - a for a, b in itertools.pairwise(cpu)]),
        "steady_steps": train.steps - train.warmup_steps - 1,
        "tokens_total": end_tokens,
        "logged_num_tokens": logged[-1] if logged else None,
    }


def from_spec(path: str) -> dict[str, Any]:
    """The cell of a suite run's spec.json, as its worker starts it (threads, then the same imports), in this
    process: only the suite's measurement is left out."""
    spec = WorkerSpec.read(path)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS") or spec.profile.threads_per_process))
    import_libraries(spec)
    rows = prepare(spec.workload).dataset_for(method_spec(spec.cell.method).data)  # the spec's own folder is gone
    with tempfile.TemporaryDirectory(prefix="plain_dpo-") as out_dir:
        dataset = cell_dataset(rows, Path(out_dir) / "dataset")
        assets = spec.assets.model_copy(update={"dataset": dataset})
        speed = steady_speed(spec.model_copy(update={"assets": assets, "out_dir": out_dir}))
    return speed | {"fresh_reason": os.environ.get(FRESH_ENV)}


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cell", default="one_adapter-none-single", help="a cell id of the single backend")
    parser.add_argument("--hw", default="cpu")
    parser.add_argument("--workload", default=None)
    parser.add_argument("--spec", default=None, help="a suite run's configs/<cell>/spec.json: that cell as its worker")


def run(args: argparse.Namespace) -> int:
    """One JSON line: the cell's steady speed as a plain script."""
    if args.spec:
        print(json.dumps(from_spec(args.spec)))
        return 0
    cell = matrix_cell(args.cell)
    if cell is None:
        raise BenchError(f"unknown cell {args.cell!r}; `python -m bench list` shows the cell ids")
    if cell.backend != Backend.SINGLE:
        raise BenchError("the plain script runs cells of the single backend only (one process, one device)")

    profile = load_profile(args.hw)
    workload = load_workload(args.workload or profile.workload)
    assets = prepare(workload)
    torch.set_num_threads(profile.threads_per_process)
    with tempfile.TemporaryDirectory(prefix="plain_dpo-") as out_dir:
        assets = assets.model_copy(update={"dataset": cell_dataset(assets.dataset, Path(out_dir) / "dataset")})
        spec = WorkerSpec.from_plan(plan_for(cell, profile, workload), assets, out_dir)
        print(json.dumps(steady_speed(spec)))
    return 0


def main(argv: list[str] | None = None) -> int:
    """The tool as a process of its own: overhead's baseline, run by the interpreter of the venv under test."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m bench.selfbench.plain_dpo", description=__doc__.splitlines()[0])
    arguments(parser)
    args = parser.parse_args(argv)
    args.argv = argv
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
