"""What a launcher is: the description every launcher module fills in (bench/launchers/<name>.py), and what its
command lines are made of."""

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from bench.launchers.job import JobLaunch, NodeLayout, one_launcher_per_node


def program_path(python: str, name: str | None) -> str:
    """The launcher installed beside the interpreter (same venv), else whatever PATH has; None: the interpreter."""
    if name is None:
        return python
    candidate = Path(python).parent / name
    return str(candidate) if candidate.exists() else name


TORCH_RANK_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE")
"""torch's own rank variables (global rank, local rank, world size): what torchrun sets and accelerate reads."""


@dataclass(frozen=True)
class LaunchInputs:
    """What any launcher's command line is made of."""

    python: str
    processes: int
    port: int
    worker: tuple[str, ...]
    """`-m bench.worker SPEC.json`"""
    accelerate_config: str | None = None
    gpus: bool = False
    """The ranks run on the GPUs the launch environment's CUDA_VISIBLE_DEVICES names (cuda profiles)."""


@dataclass(frozen=True)
class LauncherSpec:
    name: str
    """The launcher's id (bench/matrix/axes.py Launcher)."""
    summary: str
    program: str | None
    """Executable installed beside the interpreter (or on PATH); None: the interpreter itself."""
    rank_env: tuple[str, str, str] | None
    """(global rank, local rank, world size) variables each rank finds; None: a single process, rank 0 of 1."""
    argv: Callable[[LaunchInputs, str], list[str]]
    """The command line on one machine, from the inputs and the resolved program path."""
    node_argv: Callable[[LaunchInputs, str, NodeLayout], list[str]]
    """The command line on each node of a scheduler job (the same on every node; the job variables of
    bench/launchers/job.py differ)."""
    job: Callable[[list[str], NodeLayout], JobLaunch] = one_launcher_per_node
    """How a job starts `node_argv`: the Slurm tasks and the srun line."""
    module: str | None = None
    """The Python module that executable runs (`python -m <module>` where no script is beside the interpreter)."""
    reads_accelerate_config: bool = False
    """Launched with a generated accelerate.yaml, which also carries the DeepSpeed config (otherwise the worker
    passes it to TrainingArguments(deepspeed=))."""
    rank_exit: re.Pattern[str] | None = None
    """How the launcher reports a rank that died: named groups `rank` and `code` (exit code) or `signal`."""
    root_env: tuple[tuple[str, str], ...] = ()
    """Extra environment when run as root."""

    @property
    def multi_process(self) -> bool:
        return self.rank_env is not None

    def command(self, inputs: LaunchInputs, python: str) -> list[str]:
        """The launcher's command line on one machine, for the interpreter `python`. Its script beside the
        interpreter where it is installed there; else the module the script runs, through this interpreter (`python
        -m torch.distributed.run`): a venv over a box's system packages (make setup WHEELHOUSE=) has no `accelerate`
        or `torchrun` script of its own, and the system's would run the system's interpreter, without the packages
        the venv added; packages installed with `pip --target` have no scripts at all. An interpreter that is not on
        this machine (a plan for another: a container, a test) keeps the script's name."""
        beside = Path(python).parent / self.program if self.program else None
        if self.module is None or beside is None or beside.exists() or not Path(python).exists():
            return self.argv(inputs, program_path(python, self.program))
        _, *rest = self.argv(inputs, self.program or python)
        return [python, "-m", self.module, *rest]

    def environment(self, as_root: bool) -> dict[str, str]:
        """What the launcher itself needs in the launch environment, beyond what every cell gets."""
        return dict(self.root_env) if as_root else {}

    def rank(self, environ: Mapping[str, str]) -> tuple[int, int, int]:
        """(rank, local rank, world size) as this launcher tells each process; (0, 0, 1) for a single process."""
        if self.rank_env is None:
            return 0, 0, 1
        rank, local, world = (environ.get(name) for name in self.rank_env)
        return int(rank or 0), int(local or 0), int(world or 1)

    def torch_rank_env(self, environ: Mapping[str, str]) -> dict[str, str]:
        """RANK, LOCAL_RANK and WORLD_SIZE from a launcher that tells ranks who they are in its own variables
        (mpirun's OMPI_COMM_WORLD_*), where they are not set already. Pure."""
        names = self.rank_env
        if names is None or names == TORCH_RANK_ENV or any(name in environ for name in TORCH_RANK_ENV):
            return {}
        if not all(name in environ for name in names):
            return {}
        return dict(zip(TORCH_RANK_ENV, (str(v) for v in self.rank(environ)), strict=True))
