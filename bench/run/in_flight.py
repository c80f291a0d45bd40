"""Every cell of a run in flight at once under a scheduler: one thread per cell trial submits its job and waits;
the cluster decides the order. Records are appended by this (the main) thread as each job ends, with one progress
line per job and the queue's state (running, pending, ...). Ctrl-C (or SIGTERM, SIGHUP) scancels every job of the
run and waits until none is left before it re-raises.
"""

import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING

from bench.isolation.deferred_sigint import stopped_by
from bench.judge.slurm_states import with_job_state
from bench.matrix.cell import Cell
from bench.results.layout import RunFolder, trial_key
from bench.results.schema import PredictionSummary, ResultRecord
from bench.run.unrecorded import append_or_keep
from bench.worker.report import read_rank_reports

if TYPE_CHECKING:
    from bench.executors.slurm.executor import SlurmExecutor
    from bench.run.cell import RunContext

QUEUE_LINE_S = 30.0
"""Seconds between queue lines while no job ends."""


def run_cell_job(ctx: "RunContext", cell: Cell, trial: int, prediction: PredictionSummary | None) -> ResultRecord:
    from bench.run.cell import run_cell

    executor: SlurmExecutor = ctx.executor  # type: ignore[assignment]
    key = trial_key(cell.id, trial)  # the name of the trial's log, which the executor keys its jobs by
    # a job an earlier run submitted may still be writing into the cell's folder, or have left its result there
    record = run_cell(ctx, cell, trial, prediction, fresh=executor.earlier_job(key, cell.id) is None)
    reports, _ = read_rank_reports(RunFolder(ctx.run_dir).cell(cell.id))
    return with_job_state(record, executor.final_state(key), reports)


def run_in_flight(
    ctx: "RunContext",
    todo: list[tuple[Cell, int]],
    predictions: dict[str, PredictionSummary | None],
    done: dict[str, ResultRecord],
    out=sys.stdout,
) -> None:
    executor: SlurmExecutor = ctx.executor  # type: ignore[assignment]
    if not todo:
        return
    pool = ThreadPoolExecutor(max_workers=len(todo), thread_name_prefix="slurm-cell")
    futures: dict[Future, tuple[Cell, int]] = {
        pool.submit(run_cell_job, ctx, cell, trial, predictions.get(cell.id)): (cell, trial) for cell, trial in todo
    }
    print(f"submitting {len(todo)} job(s) to Slurm; results are recorded as each job ends", file=out, flush=True)
    from bench.run.progress import format_progress

    started, finished, last_queue = time.monotonic(), 0, ""
    remaining = set(futures)
    try:
        while remaining:
            ended, remaining = wait(remaining, timeout=QUEUE_LINE_S, return_when=FIRST_COMPLETED)
            for future in ended:
                cell, _ = futures[future]
                record = future.result()
                append_or_keep(ctx.run_dir, record)  # kept outside the results folder when it cannot be
                done[cell.id] = record
                finished += 1
                line = format_progress(finished, len(todo), record, time.monotonic() - started)
                job = f" | job {record.slurm_job_id} {record.slurm_state}" if record.slurm_job_id else ""
                print(line + job, file=out, flush=True)
            queue = executor.queue_summary()
            if queue != last_queue and remaining:
                print(f"      jobs: {queue}", file=out, flush=True)
                last_queue = queue
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM / SIGHUP (bench/isolation/deferred_sigint.py)
        print(
            f"\ninterrupted{stopped_by(exc)}: cancelling every job of run {ctx.run_id} (scancel) ...",
            file=out,
            flush=True,
        )
        left = executor.cancel_all()
        pool.shutdown(wait=False, cancel_futures=True)
        state = f"{len(left)} job(s) still alive: {', '.join(left)}" if left else "no job of the run is left"
        print(f"{state}; re-run with --run-id {ctx.run_id} to resume", file=out, flush=True)
        raise
    except Exception:  # e.g. sbatch refused a job: nothing of the run stays queued behind the error
        executor.cancel_all()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
