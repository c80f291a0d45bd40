"""What a scheduler job's launch is made of: the job's nodes and ranks, the shell variables its script sets, and
how Slurm tasks start a launcher's node command line (each launcher's own line: bench/launchers/<name>.py).

Arguments that depend on the job (the head node, the node's rank, the job id) are shell variables the job script sets
(`JOB_VARIABLES`) and that each task expands when it starts, so the same plan holds for any allocation.
"""

import shlex
from dataclasses import dataclass, field

HEAD = "$MASTER_ADDR"
"""The head node's address: the job script exports it (the first node of the allocation, by its NodeAddr)."""
PORT = "$MASTER_PORT"
NODE_RANK = "$SLURM_NODEID"
JOB_ID = "$SLURM_JOB_ID"
HOSTFILE = "$BENCH_HOSTFILE"
JOB_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "BENCH_HOSTFILE")
"""Set by the job script before the launch (bench/executors/slurm/job.sbatch); SLURM_* come from Slurm itself."""


@dataclass(frozen=True)
class NodeLayout:
    nodes: int
    per_node: int
    """Ranks on each node."""
    threads: int = 1
    """CPU threads of each rank."""

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.per_node < 1 or self.threads < 1:
            raise ValueError(f"a layout needs at least one node, rank and thread: {self}")

    @property
    def world(self) -> int:
        return self.nodes * self.per_node


@dataclass(frozen=True)
class JobLaunch:
    """How a job starts the ranks of one cell."""

    tasks_per_node: int
    """sbatch --ntasks-per-node: Slurm tasks on each node (a launcher per node, or mpirun's ranks)."""
    cpus_per_task: int
    node_argv: list[str]
    """The command each task (or the job script, for mpirun) runs; `$VARIABLES` expand in the job."""
    srun: list[str] = field(default_factory=list)
    """The srun prefix that starts `node_argv` once per task; empty: the job script runs it itself (mpirun)."""

    def script_line(self) -> str:
        """The job script's launch line. Under srun the node command runs in a shell of its own task, so that
        `$SLURM_NODEID` is that task's node, not the batch script's."""
        node = " ".join(quote(arg) for arg in self.node_argv)
        if not self.srun:
            return node
        return " ".join(shlex.quote(arg) for arg in self.srun) + " bash -c " + shlex.quote(f"exec {node}")


def quote(arg: str) -> str:
    """Shell-quote `arg`, leaving the job variables (`$MASTER_ADDR`, `$SLURM_NODEID`, ...) to expand."""
    if "$" not in arg:
        return shlex.quote(arg)
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`")
    return f'"{escaped}"'


def one_launcher_per_node(argv: list[str], layout: NodeLayout) -> JobLaunch:
    """`srun --ntasks-per-node=1` starts the launcher once on every node; it starts that node's ranks."""
    cpus = layout.per_node * layout.threads
    srun = ["srun", f"--nodes={layout.nodes}", "--ntasks-per-node=1", f"--cpus-per-task={cpus}", "--kill-on-bad-exit=1"]
    return JobLaunch(1, cpus, argv, srun)
