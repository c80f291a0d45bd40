"""Every cell of a run in flight at once under a scheduler: one thread per cell trial submits its job and waits;
the cluster decides the order. This (the main) thread records each trial as its job ends (bench/run/trial.py), its
progress line naming the job, and says the queue's state (running, pending, ...). Ctrl-C (or SIGTERM, SIGHUP)
scancels every job of the run and waits until none is left before it re-raises.
"""

from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING

from bench.isolation.deferred_sigint import stopped_by
from bench.judge.slurm_states import with_job_state
from bench.matrix.cell import Cell
from bench.results.layout import RunFolder, trial_key
from bench.results.schema import ResultRecord
from bench.run.trial import Lifecycle, Trial
from bench.worker.report import read_rank_reports

if TYPE_CHECKING:
    from bench.executors.slurm.executor import SlurmExecutor

QUEUE_LINE_S = 30.0
"""Seconds between queue lines while no job ends."""


def run_cell_job(trials: Lifecycle, trial: Trial) -> ResultRecord:
    executor: SlurmExecutor = trials.ctx.executor  # type: ignore[assignment]
    cell = trial.cell
    key = trial_key(cell.id, trial.trial)  # the name of the trial's log, which the executor keys its jobs by
    # a job an earlier run submitted may still be writing into the cell's folder, or have left its result there
    record = trials.run(trial, fresh=executor.earlier_job(key, cell.id) is None)
    reports, _ = read_rank_reports(RunFolder(trials.ctx.run_dir).cell(cell.id))
    return with_job_state(record, executor.final_state(key), reports)


def run_in_flight(trials: Lifecycle, todo: list[tuple[Cell, int]]) -> None:
    """Submit every trial of `todo` at once; record each as its job ends (bench/run/trial.py), on a node of the
    cluster: not marked with this machine's other runners."""
    from bench.run.trial import Trial

    ctx, out = trials.ctx, trials.out
    executor: SlurmExecutor = ctx.executor  # type: ignore[assignment]
    if not todo:
        return
    pool = ThreadPoolExecutor(max_workers=len(todo), thread_name_prefix="slurm-cell")
    futures: dict[Future, Trial] = {
        pool.submit(run_cell_job, trials, trial): trial for trial in (Trial(cell, index) for cell, index in todo)
    }
    print(f"submitting {len(todo)} job(s) to Slurm; results are recorded as each job ends", file=out, flush=True)
    last_queue = ""
    remaining = set(futures)
    try:
        while remaining:
            ended, remaining = wait(remaining, timeout=QUEUE_LINE_S, return_when=FIRST_COMPLETED)
            for future in ended:
                record = future.result()
                job = f" | job {record.slurm_job_id} {record.slurm_state}" if record.slurm_job_id else ""
                trials.finish(futures[future], record, None, suffix=job)
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
