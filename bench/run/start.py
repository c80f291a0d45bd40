"""Taking a run before it starts: its folder made and locked (one runner per run), its env.json checked against the
settings asked for, what dead runners left behind cleaned up, and this runner registered among the machine's."""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.results.env_schema import Training


@contextmanager
def taken_run(
    results: Path,
    run_dir: Path,
    training: "Training",
    defaults: "Callable[[], Training]",
    force: bool = False,
    resumes_jobs: bool = False,
) -> Iterator[None]:
    """Hold the run `run_dir` for the body; each notice one line on standard output. `training`: the settings asked
    for, `defaults` those of no training-setting flag (records without env.json are re-run only with `force`).
    `resumes_jobs`: a dead runner's Slurm jobs of this run are waited for, not cancelled."""
    from bench.results.env import check_resumable
    from bench.results.run_folder import open_run
    from bench.run.leftovers import clean_up_dead_runners, remove_left_fork_folders
    from bench.run.runner_registry import registered, sharing_notices

    # one line when the folder cannot be made or written, or another runner holds it; removed if nothing is recorded
    with open_run(results, run_dir) as lock:
        check_resumable(run_dir, force, training, defaults)
        if lock.dead_holder:
            print(f"notice: run {run_dir.name} was held by runner {lock.dead_holder}, which is gone: taking it over")
        left = clean_up_dead_runners(run_dir.parent, run_dir, lock.dead_holder, resumes_jobs)
        for line in left + remove_left_fork_folders():
            print(f"cleaned up: {line}", flush=True)
        with registered(run_dir.name, run_dir) as others:  # cells measured while another runner runs are marked
            for line in sharing_notices(others):
                print(line, flush=True)
            yield
