"""Open MPI's mpirun. Its ranks learn who they are from OMPI_COMM_WORLD_* (accelerate reads them on the CPU; the
worker maps them to torch's variables on accelerators). In a job the script runs it once: Open MPI reads the Slurm
allocation and starts its daemons on the nodes through srun, P ranks per node."""

import re

from bench.launchers.base import LauncherSpec, LaunchInputs
from bench.launchers.job import JobLaunch, NodeLayout

FORWARDED = ("MASTER_ADDR", "MASTER_PORT")
"""Rendezvous variables mpirun passes on to its ranks (`-x`)."""


def _forwarded() -> list[str]:
    return [arg for name in FORWARDED for arg in ("-x", name)]


def argv(inputs: LaunchInputs, program: str) -> list[str]:
    return [program, "-np", str(inputs.processes), "--oversubscribe", *_forwarded(), inputs.python, *inputs.worker]


def node_argv(inputs: LaunchInputs, program: str, layout: NodeLayout) -> list[str]:
    return [
        program,
        "-np",
        str(layout.world),
        "--map-by",
        f"ppr:{layout.per_node}:node",
        "--oversubscribe",
        *_forwarded(),
        inputs.python,
        *inputs.worker,
    ]


def job(line: list[str], layout: NodeLayout) -> JobLaunch:
    """The job script runs mpirun itself; its ranks are the job's tasks."""
    return JobLaunch(layout.per_node, layout.threads, line)


LAUNCHER = LauncherSpec(
    name="mpirun",
    summary="Open MPI's mpirun; accelerate reads OMPI_COMM_WORLD_* for the rank",
    program="mpirun",
    rank_env=("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"),
    argv=argv,
    node_argv=node_argv,
    job=job,
    rank_exit=re.compile(r"process rank (?P<rank>\d+) with PID \d+ on node \S+ exited on signal (?P<signal>\d+)"),
    root_env=(("OMPI_ALLOW_RUN_AS_ROOT", "1"), ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")),
)
