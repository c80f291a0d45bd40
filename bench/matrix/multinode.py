"""Launch plans that span the nodes of a scheduler job, with rendezvous on the job's head node.

A single-machine plan (bench/run/launch.py) becomes, for a job of N nodes x P ranks:
- torchrun, accelerate, deepspeed: one launcher per node, started by `srun --ntasks-per-node=1`, each starting its P
  ranks; they meet on the head node (torchrun: c10d rendezvous; accelerate: num_machines / machine_rank /
  main_process_ip; deepspeed: a hostfile of the job's nodes and `--no_ssh --node_rank`);
- mpirun: run once by the job script; Open MPI reads the Slurm allocation and starts its daemons on the nodes through
  srun, P ranks per node;
- python (one process): `srun` with one task on one node.

Arguments that depend on the job (the head node, the node's rank, the job id) are shell variables the job script sets
(`JOB_VARIABLES`) and that each task expands when it starts, so the same plan holds for any allocation.
"""

import shlex
from dataclasses import dataclass, field

from bench.matrix.axes import Launcher
from bench.matrix.backends import LaunchInputs

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


def node_argv(launcher: Launcher | str, inputs: LaunchInputs, program: str, layout: NodeLayout) -> list[str]:
    """The launcher's command line on one node of the job (the same on every node; job variables differ)."""
    launcher = Launcher(launcher)
    worker = list(inputs.worker)
    if launcher == Launcher.PYTHON:
        return [program, *worker]
    if launcher == Launcher.TORCHRUN:
        return [
            program,
            f"--nnodes={layout.nodes}",
            f"--nproc_per_node={layout.per_node}",
            "--rdzv_backend=c10d",
            f"--rdzv_endpoint={HEAD}:{PORT}",
            f"--rdzv_id={JOB_ID}",
            *worker,
        ]
    if launcher == Launcher.ACCELERATE:
        if inputs.accelerate_config is None:
            raise ValueError("accelerate needs its generated config file")
        return [
            program,
            "launch",
            "--config_file",
            inputs.accelerate_config,
            f"--num_machines={layout.nodes}",
            f"--num_processes={layout.world}",
            f"--machine_rank={NODE_RANK}",
            f"--main_process_ip={HEAD}",
            f"--main_process_port={PORT}",
            # DeepSpeed configs: torchrun on each node (srun started it), not accelerate's default pdsh, which would
            # also write the whole environment to ./.deepspeed_env for pdsh to carry
            "--deepspeed_multinode_launcher=standard",
            *worker,
        ]
    if launcher == Launcher.DEEPSPEED:
        module, *rest = worker[1:]  # `-m bench.worker SPEC` -> `--module bench.worker SPEC`
        return [
            program,
            f"--hostfile={HOSTFILE}",
            "--no_ssh",
            f"--node_rank={NODE_RANK}",
            f"--master_addr={HEAD}",
            f"--master_port={PORT}",
            f"--num_nodes={layout.nodes}",
            f"--num_gpus={layout.per_node}",
            "--no_local_rank",
            "--module",
            module,
            *rest,
        ]
    if launcher == Launcher.MPIRUN:
        forwarded = [arg for name in ("MASTER_ADDR", "MASTER_PORT") for arg in ("-x", name)]
        return [
            program,
            "-np",
            str(layout.world),
            "--map-by",
            f"ppr:{layout.per_node}:node",
            "--oversubscribe",
            *forwarded,
            inputs.python,
            *worker,
        ]
    raise ValueError(f"no multi-node plan for launcher {launcher}")


def job_launch(launcher: Launcher | str, inputs: LaunchInputs, program: str, layout: NodeLayout) -> JobLaunch:
    """The Slurm tasks and the srun line that start a cell's ranks on every node of its job."""
    launcher = Launcher(launcher)
    argv = node_argv(launcher, inputs, program, layout)
    if launcher == Launcher.PYTHON:
        if layout.world != 1:
            raise ValueError(f"the python launcher runs one process, not {layout.world}")
        return JobLaunch(
            1, layout.threads, argv, ["srun", "--nodes=1", "--ntasks=1", f"--cpus-per-task={layout.threads}"]
        )
    if launcher == Launcher.MPIRUN:
        return JobLaunch(layout.per_node, layout.threads, argv)
    cpus = layout.per_node * layout.threads
    srun = ["srun", f"--nodes={layout.nodes}", "--ntasks-per-node=1", f"--cpus-per-task={cpus}", "--kill-on-bad-exit=1"]
    return JobLaunch(1, cpus, argv, srun)
