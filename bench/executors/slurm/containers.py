"""Cells in containers inside Slurm jobs: Pyxis/enroot, Apptainer, or docker kept under the job's cgroup.

- pyxis: srun's own flags (`--container-image`, `--container-mounts`, `--container-workdir`); the SPANK plugin starts
  each task in an enroot container.
- apptainer: `apptainer exec --bind ... IMAGE` before the command each task runs (for mpirun: before each rank's
  python, the hybrid model).
- docker: `docker run` in each task. dockerd, not slurmstepd, starts the container, so it would escape scancel and
  --mem: `--cgroup-parent` puts it under the job's cgroup (cgroup v1 path of task/cgroup), and the label lets the
  Epilog (bench/executors/slurm/epilog-docker.sh) remove whatever is left when the job ends.
"""

from dataclasses import replace
from typing import Literal

from pydantic import Field

from bench.errors import BenchError
from bench.launchers.job import JOB_VARIABLES, JobLaunch
from bench.matrix.yaml_schema import Strict

DOCKER_LABEL = "dpo-bench.slurm-job"
DOCKER_CGROUP_PARENT = "/slurm_${SLURMD_NODENAME}/uid_${SLURM_JOB_UID}/job_${SLURM_JOB_ID}"
"""The job's cgroup under task/cgroup on cgroup v1 (`slurm_<node>/uid_<uid>/job_<id>`)."""


class SlurmContainer(Strict):
    runtime: Literal["pyxis", "apptainer", "docker"]
    image: str = Field(
        min_length=1, description="pyxis: an enroot image URI or .sqsh; apptainer: a .sif; docker: a tag"
    )
    mounts: list[str] = Field(default_factory=list, description="extra host folders, mounted at the same path")
    gpus: bool = Field(default=False, description="apptainer --nv / docker --gpus all")


def wrap(launch: JobLaunch, spec: SlurmContainer, folders: list[str], env_names: list[str], workdir: str) -> JobLaunch:
    """`launch` with its ranks in containers of `spec`; `folders` (the project, the run) are mounted at their own
    path, `env_names` are passed into docker containers (the others inherit the task's environment)."""
    mounts = list(dict.fromkeys([*folders, *spec.mounts]))
    if spec.runtime == "pyxis":
        if not launch.srun:
            raise BenchError("container runtime pyxis: mpirun cells are not supported (pyxis starts srun tasks)")
        flags = [
            f"--container-image={spec.image}",
            f"--container-mounts={','.join(f'{m}:{m}' for m in mounts)}",
            f"--container-workdir={workdir}",
        ]
        return replace(launch, srun=[launch.srun[0], *flags, *launch.srun[1:]])
    if spec.runtime == "apptainer":
        prefix = ["apptainer", "exec", *(["--nv"] if spec.gpus else []), "--bind", ",".join(mounts)]
        prefix += ["--pwd", workdir, spec.image]
        return replace(launch, node_argv=_before_ranks(launch, prefix))
    if not launch.srun:
        raise BenchError("container runtime docker: mpirun cells are not supported (ranks on other nodes)")
    names = list(dict.fromkeys([*env_names, *JOB_VARIABLES]))
    prefix = [
        "docker",
        "run",
        "--rm",
        "--network=host",
        "--ipc=host",
        f"--cgroup-parent={DOCKER_CGROUP_PARENT}",
        f"--label={DOCKER_LABEL}=$SLURM_JOB_ID",
        *(["--gpus=all"] if spec.gpus else []),
        *[arg for m in mounts for arg in ("-v", f"{m}:{m}")],
        "-w",
        workdir,
        *[arg for name in names for arg in ("-e", name)],
        spec.image,
    ]
    return replace(launch, node_argv=prefix + launch.node_argv)


def _before_ranks(launch: JobLaunch, prefix: list[str]) -> list[str]:
    if launch.srun:
        return prefix + launch.node_argv
    # mpirun: mpirun runs on the host, each rank's interpreter in the container
    argv = launch.node_argv
    python_at = next(i for i, arg in enumerate(argv) if arg.endswith(("python", "python3")) or "/python" in arg)
    return argv[:python_at] + prefix + argv[python_at:]
