"""The interpreter itself: one process, rank 0 of 1; in a job, `srun` with one task on one node."""

from bench.launchers.base import LauncherSpec, LaunchInputs
from bench.launchers.job import JobLaunch, NodeLayout


def argv(inputs: LaunchInputs, program: str) -> list[str]:
    return [program, *inputs.worker]


def node_argv(inputs: LaunchInputs, program: str, layout: NodeLayout) -> list[str]:
    return argv(inputs, program)


def job(line: list[str], layout: NodeLayout) -> JobLaunch:
    if layout.world != 1:
        raise ValueError(f"the python launcher runs one process, not {layout.world}")
    return JobLaunch(1, layout.threads, line, ["srun", "--nodes=1", "--ntasks=1", f"--cpus-per-task={layout.threads}"])


LAUNCHER = LauncherSpec(
    name="python",
    summary="the worker module run by the interpreter: one process",
    program=None,
    rank_env=None,
    argv=argv,
    node_argv=node_argv,
    job=job,
)
