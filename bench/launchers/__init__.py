"""Every launcher in one place each: bench/launchers/<name>.py holds its command line on one machine and on each
node of a job, what it adds to the environment and the variables its ranks read their rank from; LAUNCHERS is the
table everything else consults (run/launch.py, executors/slurm, the worker, judge/classify.py). A new launcher is
one module here plus its entry below (and its id in bench/matrix/axes.py Launcher)."""

from collections.abc import Mapping

from bench.launchers import accelerate, deepspeed, mpirun, python, torchrun
from bench.launchers.base import LauncherSpec, LaunchInputs
from bench.launchers.job import JobLaunch, NodeLayout
from bench.matrix.axes import Launcher

LAUNCHERS: dict[str, LauncherSpec] = {
    Launcher.PYTHON: python.LAUNCHER,
    Launcher.TORCHRUN: torchrun.LAUNCHER,
    Launcher.ACCELERATE: accelerate.LAUNCHER,
    Launcher.DEEPSPEED: deepspeed.LAUNCHER,
    Launcher.MPIRUN: mpirun.LAUNCHER,
}
"""Launcher id -> its description (a StrEnum member is its own string: `LAUNCHERS["torchrun"]` finds it)."""


def launcher_spec(launcher: str) -> LauncherSpec:
    try:
        return LAUNCHERS[str(launcher)]
    except KeyError:
        raise ValueError(f"unknown launcher {launcher!r}: known {', '.join(LAUNCHERS)}") from None


def rank_from_env(launcher: str, environ: Mapping[str, str]) -> tuple[int, int, int]:
    """(rank, local rank, world size) as `launcher` tells each process; (0, 0, 1) for a single process."""
    return launcher_spec(launcher).rank(environ)


def torch_rank_env(launcher: str, environ: Mapping[str, str]) -> dict[str, str]:
    """torch's rank variables from the launcher's own, where it has others and they are not set already.

    On GPUs accelerate forms a process group only when LOCAL_RANK is set (accelerate/state.py, PartialState and
    `_prepare_backend`); it reads OMPI_COMM_WORLD_* on its CPU path only (get_cpu_distributed_information), so
    mpirun's ranks would each train alone."""
    return launcher_spec(launcher).torch_rank_env(environ)


def node_argv(launcher: str, inputs: LaunchInputs, program: str, layout: NodeLayout) -> list[str]:
    """The launcher's command line on one node of the job (the same on every node; job variables differ)."""
    return launcher_spec(launcher).node_argv(inputs, program, layout)


def job_launch(launcher: str, inputs: LaunchInputs, program: str, layout: NodeLayout) -> JobLaunch:
    """The Slurm tasks and the srun line that start a cell's ranks on every node of its job."""
    spec = launcher_spec(launcher)
    return spec.job(spec.node_argv(inputs, program, layout), layout)
