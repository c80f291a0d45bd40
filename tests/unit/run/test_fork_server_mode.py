"""Where a run's cells fork from its fork server and where they start fresh (pure)."""

from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.executors.local import LocalExecutor
from bench.matrix.profiles import ForkValidation, load_profile
from bench.run.fork_server_mode import why_fresh


@dataclass
class Other:
    """An executor other than the local one (docker, slurm: their cells start where no fork server runs)."""

    name: str
    image: str | None = None
    python: str = "python3"
    concurrent: bool = False
    memory_budget_bytes: int | None = None


def Executor(name: str = "local", memory_budget_bytes: int | None = None):
    if name == "local":
        return LocalExecutor(Path.cwd(), memory_budget_bytes=memory_budget_bytes)
    return Other(name, memory_budget_bytes=memory_budget_bytes)


@pytest.mark.parametrize(
    ("choice", "executor", "profile", "why"),
    [
        ("auto", Executor(), "cpu", None),
        ("forked", Executor(), "cpu", None),
        ("fresh", Executor(), "cpu", "--start fresh"),
        ("auto", Executor("docker"), "cpu", "the docker executor"),
        ("forked", Executor("slurm"), "cpu", "the slurm executor"),
        ("auto", Executor(memory_budget_bytes=1 << 30), "cpu-budget", "memory budget"),
        ("forked", Executor(memory_budget_bytes=1 << 30), "cpu-budget", "memory budget"),
        ("auto", Executor(), "1xH100", "not yet validated"),
        ("forked", Executor(), "1xH100", None),
    ],
)
def test_cells_fork_on_cpu_with_the_local_executor_and_no_budget_unless_asked(choice, executor, profile, why):
    answer = why_fresh(choice, executor, load_profile(profile))
    assert answer is None if why is None else why in answer


def test_auto_forks_on_an_accelerator_once_its_profile_names_the_runs_that_showed_forking_changes_no_status():
    gpu = load_profile("1xH200")
    assert "not yet validated for 1xH200" in why_fresh("auto", Executor(), gpu)
    validated = gpu.model_copy(update={"fork_validated_by": ForkValidation(forked="a", fresh="b")})
    assert why_fresh("auto", Executor(), validated) is None
    assert "memory budget" in why_fresh("auto", Executor(memory_budget_bytes=1 << 30), validated)
